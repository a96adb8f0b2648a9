--[[
  Cancel a workflow: every step not created yet cancelled (state C, "workflow cancelled"); the
  caller cancels the tasks of the created ones through the task cancel path (their ends reach the
  workflow through the outbox, and an advance creates nothing for a cancelled workflow).
  A RUNNING workflow becomes CANCELLED. A FAILED one whose other branches still have work (a step
  created, or one waiting that the failure did not cancel) stays FAILED, the failure being what
  it ended with, and is marked cancelled (`cancelled_at`): nothing of it starts any more, and a
  DLQ retry of its failed step no longer resumes it.
  Input:
    KEYS[1] the workflow's partition key prefix
    ARGV[1] workflow id  ARGV[2] now (ms)  ARGV[3] how long a finished workflow is kept (ms)
  Output:
    {0, task ids of the steps whose task may run: created, or ready and maybe created by an advance
    not yet recorded (a missing one is refused by the task cancel)}; {-1} no such workflow;
    {-2, status} finished already (SUCCEEDED, CANCELLED, or FAILED with nothing left to stop)
]]
-- #include common
-- #include workflow
local K = partition_keys(KEYS[1])
local W = wf_keys(K, ARGV[1])
local w = read_task(W.w, 'status', 'steps_total', 'cancelled_at')
if not w.status then return {-1} end
if w.status ~= 'RUNNING' and (w.status ~= 'FAILED' or w.cancelled_at) then return {-2, w.status} end
local states = {}
local flat = rcall('HGETALL', W.state)
for i = 1, #flat, 2 do states[flat[i]] = flat[i + 1] end
local total = tonumber(w.steps_total)
if w.status == 'FAILED' then
  local left = false
  for i = 0, total - 1 do
    local st = states[tostring(i)] or 'W'
    if st == 'S' or st == 'W' then left = true break end
  end
  if not left then return {-2, w.status} end
  rcall('HSET', W.w, 'cancelled_at', ARGV[2], 'updated_at', ARGV[2])
else
  rcall('HSET', W.w, 'status', 'CANCELLED', 'finished_at', ARGV[2], 'updated_at', ARGV[2])
end
local pending = {}
flat = rcall('HGETALL', W.pending)
for i = 1, #flat, 2 do pending[flat[i]] = tonumber(flat[i + 1]) end
local ids = {}
for i = 0, total - 1 do
  local key = tostring(i)
  local st = states[key] or 'W'
  -- A step the failure cancelled keeps the reason it gave.
  if st == 'W' or (st == 'C' and w.status == 'RUNNING') then
    rcall('HSET', W.state, key, 'C')
    rcall('HSET', W.reason, key, 'workflow cancelled')
  end
  -- A created step, or a waiting one whose dependencies are done: its task may exist (made by an
  -- advance that has not recorded it yet, or whose driver died in between).
  if st == 'S' or (st == 'W' and (pending[key] or 0) <= 0) then
    ids[#ids + 1] = cjson.decode(rcall('HGET', W.def, key)).t
  end
end
wf_retain(W, w.status == 'RUNNING' and 'CANCELLED' or w.status, tonumber(ARGV[3]), false)
return {0, ids}
