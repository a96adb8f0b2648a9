--[[
  Advance a workflow by one ended step, idempotently: whatever a crash repeats, a step is marked
  finished once, each of its successors counted down once, and the workflow's status decided
  here, in its own slot. Returns the successors now ready (every dependency finished, not created
  yet) with their input; a repeat returns them again, and the caller's fixed-id creation
  (createSteps) makes a second creation a no-op: so a group's `then` starts exactly once even when
  its last two members finish at once on two workers.
  An untolerated failure (FAILED, DEAD_LETTERED, CANCELLED, EXPIRED) marks the step F, fails the
  workflow and cancels (state C, with the reason) every step that depends on it, directly or not.
  The same task succeeding later (a DLQ retry) turns F into D, counts its successors down, and
  reopens the workflow (FAILED -> RUNNING) once no failure is left: the cancelled steps become
  ready as their dependencies finish. A tolerated failure (the step is in a member of a group
  with tolerate_failures) ends that member instead: see end_member. In a cancelled workflow, or a
  FAILED one whose remaining work was cancelled, an ended step is recorded and nothing is started
  or reopened.
  Input:
    KEYS[1] the workflow's partition key prefix
    ARGV[1] workflow id  ARGV[2] step index  ARGV[3] task id  ARGV[4] the task's final status
    (step -1 with status START: the workflow's start, see createWorkflow)
    ARGV[5] its result JSON (SUCCEEDED) or its last error ("class: message")
    ARGV[6] now (ms)  ARGV[7] how long a finished workflow is kept (ms)
  Output:
    {'missing'} no such workflow (expired); {'stale'} the step runs under another task id;
    {'ok', workflow status, ready} ready: a list of {index, definition JSON, input JSON}
]]
-- #include common
-- #include workflow
local K = partition_keys(KEYS[1])
local wid, idx, task_id, tstatus, r, now_ms, keep_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local W = wf_keys(K, wid)
local w = read_task(W.w, 'status', 'steps_total', 'done', 'failed', 'cancelled_at')
if not w.status then return {'missing'} end
if idx == '-1' and tstatus == 'START' then
  -- The workflow's start (createWorkflow's outbox entry): the steps with no dependency (no
  -- pending count at all) not created yet. Repeated, it names those still not created.
  local ready = {}
  if w.status == 'RUNNING' then
    local has_deps, states = {}, {}
    local flat = rcall('HKEYS', W.pending)
    for i = 1, #flat do has_deps[flat[i]] = true end
    flat = rcall('HGETALL', W.state)
    for i = 1, #flat, 2 do states[flat[i]] = flat[i + 1] end
    for i = 0, tonumber(w.steps_total) - 1 do
      local key = tostring(i)
      if not has_deps[key] and (states[key] or 'W') == 'W' then
        ready[#ready + 1] = {i, rcall('HGET', W.def, key), 'null'}
      end
    end
  end
  return {'ok', w.status, ready}
end
local raw = rcall('HGET', W.def, idx)
if not raw then return {'missing'} end
local def = cjson.decode(raw)
if def.t ~= task_id then return {'stale'} end
local cur = rcall('HGET', W.state, idx) or 'W'
local status, done, failed = w.status, tonumber(w.done), tonumber(w.failed)
local stopped = wf_stopped(status, w.cancelled_at)

local function error_json(text)
  local class, message = string.match(text, '^([^:]*): (.*)$')
  if not class then class, message = tstatus, text end
  return cjson.encode({error = {class = class, message = message, status = tstatus}})
end

-- The tolerated member a step is in ("3", nested "3.5"; stored 1 before members were told
-- apart), or nil.
local function member_of(d)
  local m = d.tol
  if m == nil or m == 0 or m == '' or m == '0' then return nil end
  return tostring(m)
end

local function inside(d, member)
  local m = member_of(d)
  return m ~= nil and (m == member or string.sub(m, 1, #member + 1) == member .. '.')
end

-- A tolerated failure ends its member there (as Celery stops a chain at its failure): the steps
-- of the member after it never run (K), each holding the error as its result, so the member's
-- place in its group's results holds the error; the steps after the member (the group's `then`)
-- are the ones that go on. Repeated, it finds them K and names the same steps again.
local function end_member(member, err)
  local exits, seen, todo, head = {}, {}, {}, 1
  for _, s in ipairs(def.succ) do todo[#todo + 1] = s end
  local why = string.format('step %s (task %s) ended %s; its group tolerates failures', idx, task_id, tstatus)
  while head <= #todo do
    local s = todo[head]
    head = head + 1
    if not seen[s] then
      seen[s] = true
      local d = cjson.decode(rcall('HGET', W.def, s))
      local st = rcall('HGET', W.state, s) or 'W'
      if not inside(d, member) then
        exits[#exits + 1] = s
      elseif st == 'W' or st == 'C' or st == 'K' then
        if st ~= 'K' then
          rcall('HSET', W.state, s, 'K')
          rcall('HSET', W.result, s, err)
          rcall('HSET', W.reason, s, why)
          done = done + 1
          for _, n in ipairs(d.succ) do rcall('HINCRBY', W.pending, n, -1) end
        end
        for _, n in ipairs(d.succ) do todo[#todo + 1] = n end
      end
    end
  end
  return exits
end

-- The input of a step: its expression (a step index, or a list of expressions) with each index
-- replaced by that step's result, built as text (results are JSON already).
local function input_json(expr)
  if type(expr) ~= 'number' and type(expr) ~= 'table' then return 'null' end
  local idxs = {}
  local function gather(e)
    if type(e) == 'number' then idxs[#idxs + 1] = e else for _, x in ipairs(e) do gather(x) end end
  end
  gather(expr)
  local vals = {}
  for i = 1, #idxs, 1000 do
    local chunk = {}
    for j = i, math.min(i + 999, #idxs) do chunk[#chunk + 1] = idxs[j] end
    local got = rcall('HMGET', W.result, unpack(chunk))
    for j = 1, #chunk do vals[chunk[j]] = got[j] end
  end
  local function build(e)
    if type(e) == 'number' then return vals[e] or 'null' end
    local parts = {}
    for k, x in ipairs(e) do parts[k] = build(x) end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  return build(expr)
end

local candidates = {}
local finished = cur == 'D' or cur == 'T' or cur == 'K'
local member = member_of(def)
if tstatus == 'SUCCEEDED' or (member and not stopped) then
  local err = tstatus ~= 'SUCCEEDED' and error_json(r)
  if not finished then
    rcall('HSET', W.state, idx, err and 'T' or 'D')
    rcall('HSET', W.result, idx, err or r)
    rcall('HDEL', W.reason, idx)
    done = done + 1
    if cur == 'F' then failed = failed - 1 end
    for _, s in ipairs(def.succ) do rcall('HINCRBY', W.pending, s, -1) end
  end
  if member and ((err and not finished) or cur == 'T') then
    candidates = end_member(member, rcall('HGET', W.result, idx))
  elseif cur ~= 'K' then
    candidates = def.succ
  end
elseif not finished and cur ~= 'F' and cur ~= 'C' then
  if stopped then
    rcall('HSET', W.state, idx, 'C')
    rcall('HSET', W.reason, idx, 'workflow cancelled')
  else
    rcall('HSET', W.state, idx, 'F')
    rcall('HSET', W.reason, idx, string.format('task %s ended %s%s', task_id, tstatus, r ~= '' and (': ' .. r) or ''))
    failed = failed + 1
    if status == 'RUNNING' then
      status = 'FAILED'
      rcall('HSET', W.w, 'status', status, 'finished_at', now_ms, 'failed_step', idx)
    end
    -- Everything downstream of it cannot run: cancelled, saying why (a DLQ retry undoes this).
    local why = string.format('step %s (task %s) ended %s', idx, task_id, tstatus)
    local todo, seen = {}, {}
    for _, s in ipairs(def.succ) do todo[#todo + 1] = s end
    while #todo > 0 do
      local s = table.remove(todo)
      if not seen[s] then
        seen[s] = true
        if (rcall('HGET', W.state, s) or 'W') == 'W' then
          rcall('HSET', W.state, s, 'C')
          rcall('HSET', W.reason, s, why)
          for _, n in ipairs(cjson.decode(rcall('HGET', W.def, s)).succ) do todo[#todo + 1] = n end
        end
      end
    end
  end
end

if status == 'FAILED' and failed <= 0 and not stopped then  -- a DLQ retry succeeded: the workflow goes on
  status = 'RUNNING'
  rcall('HSET', W.w, 'status', status)
  rcall('HDEL', W.w, 'finished_at', 'failed_step')
  wf_persist(W)
end
if status == 'RUNNING' and done >= tonumber(w.steps_total) then
  status = 'SUCCEEDED'
  rcall('HSET', W.w, 'status', status, 'finished_at', now_ms)
end
rcall('HSET', W.w, 'done', done, 'failed', failed, 'updated_at', now_ms)

local ready = {}
if (status == 'RUNNING' or status == 'FAILED') and not stopped then
  for _, s in ipairs(candidates) do
    local st = rcall('HGET', W.state, s) or 'W'
    if (st == 'W' or st == 'C') and tonumber(rcall('HGET', W.pending, s) or '0') <= 0 then
      local sraw = rcall('HGET', W.def, s)
      ready[#ready + 1] = {s, sraw, input_json(cjson.decode(sraw).i)}
    end
  end
end
wf_retain(W, status, keep_ms, #ready > 0)
return {'ok', status, ready}
