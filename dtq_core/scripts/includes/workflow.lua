-- A workflow's keys and shared helpers (issue 23; docs/tasks.md, "Workflows"). Needs: common.
-- Every workflow key is in the slot of the workflow's partition (the id's tag): the caller routes
-- by that partition's prefix, and wf_keys refuses an id of another partition.
-- Per-step hashes (field = step index):
--   def      JSON {t: task id, i: input expression, succ: [successors], tol: 0/1, x: {submission}}
--   state    W waiting (absent) | S created | D succeeded | T failed, tolerated | F failed | C cancelled
--   pending  dependencies not finished yet (absent: none)
--   result   the step's result JSON (a tolerated failure: {"error": {...}})
--   reason   why a step was cancelled or failed
local WF_TERMINAL = {SUCCEEDED = true, FAILED = true, CANCELLED = true}
local WF_PARTS = {'def', 'state', 'pending', 'result', 'reason'}

local function wf_keys(K, wid)
  if string.match(wid, '^([a-z0-9]+)%-w') ~= K.tag then
    return error('workflow ' .. tostring(wid) .. ' is not in partition ' .. K.tag, 0)
  end
  local w = K.wf_prefix .. wid
  return {id = wid, w = w, def = w .. ':def', state = w .. ':state', pending = w .. ':pending', result = w .. ':result',
          reason = w .. ':reason'}
end

-- A finished workflow's keys live keep_ms more; a reopened one's (a DLQ retry) again for good.
local function wf_expire(W, keep_ms)
  rcall('PEXPIRE', W.w, keep_ms)
  for _, p in ipairs(WF_PARTS) do rcall('PEXPIRE', W[p], keep_ms) end
end

local function wf_persist(W)
  rcall('PERSIST', W.w)
  for _, p in ipairs(WF_PARTS) do rcall('PERSIST', W[p]) end
end
