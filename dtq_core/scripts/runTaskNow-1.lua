--[[
  Make a delayed task or a waiting retry due now (the schedule page's "Run now"): its schedule
  entry's due time becomes now, so the scheduler leader queues it in its next round, the way it
  queues anything due (claimDue, enqueueDue: fenced, once). Nothing else changes; a task the
  leader is queueing at this moment (claimed, out of the schedule) is already on its way.
  "Now" is Redis's clock, which the leader compares due times with: an API host whose clock is
  ahead would otherwise postpone the task it means to run now.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] task id
  Output:
    {CODE.OK, status} due now; {CODE.TASK_NOT_FOUND}; {CODE.TASK_TERMINAL, status} when it already
    ended; {CODE.EXISTING, status} when it is not waiting in the schedule (queued, running)
    (codes: CODE in includes/common.lua)
]]
-- #include common
local K = partition_keys(KEYS[1])
local task_id = ARGV[1]
local status = rcall('HGET', K.task_prefix .. task_id, 'status')
if not status then return {CODE.TASK_NOT_FOUND} end
if TERMINAL[status] then return {CODE.TASK_TERMINAL, status} end
if (status ~= 'PENDING' and status ~= 'RETRYING') or not rcall('ZSCORE', K.schedule, task_id) then
  return {CODE.EXISTING, status}
end
local now_ms = server_now()
rcall('ZADD', K.schedule, 'XX', now_ms, task_id)
rcall('HSET', K.task_prefix .. task_id, 'due_at', now_ms, 'updated_at', now_ms)
return {CODE.OK, status}
