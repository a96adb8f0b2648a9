-- A workflow's keys and shared helpers (issue 23; docs/tasks.md, "Workflows"). Needs: common.
-- Every workflow key is in the slot of the workflow's partition (the id's tag): the caller routes
-- by that partition's prefix, and wf_keys refuses an id of another partition.
-- Per-step hashes (field = step index):
--   def      JSON {t: task id, i: input expression, succ: [successors], tol: 0 or the tolerated
--            member it is in ("3", nested "3.5"), x: {submission}}
--   state    W waiting (absent) | S created | D succeeded | T failed, tolerated | K not run: a
--            tolerated failure ended its member | F failed | C cancelled
--   pending  dependencies not finished yet (absent: none)
--   result   the step's result JSON (a tolerated failure, and the steps it skipped: {"error": {...}})
--   reason   why a step was cancelled, skipped or failed
local WF_PARTS = {'def', 'state', 'pending', 'result', 'reason'}

local function wf_keys(K, wid)
  if string.match(wid, '^([a-z0-9]+)%-w') ~= K.tag then
    return error('workflow ' .. tostring(wid) .. ' is not in partition ' .. K.tag, 0)
  end
  local w = K.wf_prefix .. wid
  return {id = wid, w = w, def = w .. ':def', state = w .. ':state', pending = w .. ':pending', result = w .. ':result',
          reason = w .. ':reason'}
end

local function wf_expire(W, keep_ms)
  rcall('PEXPIRE', W.w, keep_ms)
  for _, p in ipairs(WF_PARTS) do rcall('PEXPIRE', W[p], keep_ms) end
end

local function wf_persist(W)
  rcall('PERSIST', W.w)
  for _, p in ipairs(WF_PARTS) do rcall('PERSIST', W[p]) end
end

-- Called last by every script that writes a workflow: a finished one's keys live keep_ms after
-- this write, each of them, so a part first written after the finish (a step cancelled or
-- succeeding late) expires with the rest. A FAILED workflow whose other branches still run
-- (steps created and not ended, or `more` steps about to be) is kept without a TTL until they
-- end: a branch outliving DTQ_TASK_RETENTION_S must still find its workflow. A cancelled one is
-- not: its steps are being cancelled, and nothing new starts.
local function wf_steps_running(W)
  -- A step created (S) is one whose task has not ended: its end's advance moves it on.
  for _, st in ipairs(rcall('HVALS', W.state)) do
    if st == 'S' then return true end
  end
  return false
end

local function wf_retain(W, status, keep_ms, more)
  if status == 'RUNNING' then return end
  if status == 'FAILED' and not rcall('HGET', W.w, 'cancelled_at') and (more or wf_steps_running(W)) then
    wf_persist(W)
  else
    wf_expire(W, keep_ms)
  end
end

-- A workflow cancelled, or FAILED with its remaining work cancelled: nothing of it starts any more.
local function wf_stopped(status, cancelled_at)
  return status == 'CANCELLED' or (cancelled_at and true or false)
end
