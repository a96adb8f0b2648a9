--[[
  Cancel a workflow: CANCELLED, every step not created yet cancelled (state C, "workflow
  cancelled"); the caller cancels the tasks of the created ones through the task cancel path
  (their ends reach the workflow through the outbox, and an advance creates nothing for a
  cancelled workflow).
  Input:
    KEYS[1] the workflow's partition key prefix
    ARGV[1] workflow id  ARGV[2] now (ms)  ARGV[3] how long a finished workflow is kept (ms)
  Output:
    {0, task ids of the steps whose task may run: created, or ready and maybe created by an advance
    not yet recorded (a missing one is refused by the task cancel)}; {-1} no such workflow;
    {-2, status} finished already
]]
-- #include common
-- #include workflow
local K = partition_keys(KEYS[1])
local W = wf_keys(K, ARGV[1])
local w = read_task(W.w, 'status', 'steps_total')
if not w.status then return {-1} end
if WF_TERMINAL[w.status] then return {-2, w.status} end
rcall('HSET', W.w, 'status', 'CANCELLED', 'finished_at', ARGV[2], 'updated_at', ARGV[2])
local states = {}
local flat = rcall('HGETALL', W.state)
for i = 1, #flat, 2 do states[flat[i]] = flat[i + 1] end
local pending = {}
flat = rcall('HGETALL', W.pending)
for i = 1, #flat, 2 do pending[flat[i]] = tonumber(flat[i + 1]) end
local ids = {}
for i = 0, tonumber(w.steps_total) - 1 do
  local key = tostring(i)
  local st = states[key] or 'W'
  if st == 'W' or st == 'C' then
    rcall('HSET', W.state, key, 'C')
    rcall('HSET', W.reason, key, 'workflow cancelled')
  end
  -- A created step, or a waiting one whose dependencies are done: its task may exist (made by an
  -- advance that has not recorded it yet, or whose driver died in between).
  if st == 'S' or (st == 'W' and (pending[key] or 0) <= 0) then
    ids[#ids + 1] = cjson.decode(rcall('HGET', W.def, key)).t
  end
end
wf_expire(W, tonumber(ARGV[3]))
return {0, ids}
