--[[
  Cancel a task: waiting ones (PENDING, QUEUED, RETRYING) become CANCELLED at once and never
  start; for a RUNNING one the request is recorded for the owning worker's cancel watcher. A
  QUEUED task's stream entry is deleted, so it stops counting toward the depth gate (it is never
  pending anywhere: delivery and claim happen in one script; a task parked by its group's
  concurrency keeps its acknowledged entry, includes/limits.lua, deleted the same way).
  Input:
    KEYS[1] partition key prefix of the task (its id names the partition: dtq_core.keys.tag_of)
    ARGV[1] task id  ARGV[2] now (ms)  ARGV[3] now (ISO)
    ARGV[4] retention (includes/retain.lua: retention_policy)
  Output:
    {OK, 'CANCELLED'} cancelled now; {CANCEL_SIGNALLED, 'RUNNING'} cancel recorded;
    {CANCEL_REQUESTED, 'RUNNING'} a cancel is already in flight; {TASK_TERMINAL, status} already
    terminal; {TASK_NOT_FOUND} no such task (codes: CODE in includes/common.lua)
]]
-- #include common
local K = partition_keys(KEYS[1])
local task_id, now_ms = ARGV[1], ARGV[2]
local tkey = K.task_prefix .. task_id
local t = read_task(tkey, 'status', 'queue', 'attempt', 'cancel_requested', 'priority', 'entry_id', 'type')
local status = t.status
if not status then return {CODE.TASK_NOT_FOUND} end
if TERMINAL[status] then return {CODE.TASK_TERMINAL, status} end
if status == 'RUNNING' then
  if t.cancel_requested == '1' then return {CODE.CANCEL_REQUESTED, status} end
  rcall('HSET', tkey, 'cancel_requested', '1', 'updated_at', now_ms)
  return {CODE.CANCEL_SIGNALLED, status}
end
retain_finish(retention_policy(ARGV[4]), K, task_id, 'CANCELLED', now_ms, nil,
              {'status', 'CANCELLED', 'cancel_requested', '1', 'finished_at', now_ms, 'updated_at', now_ms})
schedule_rem(K.schedule, task_id, t.queue)
if status == 'QUEUED' and t.entry_id and t.entry_id ~= '' and t.queue and t.priority then
  rcall('XDEL', stream_key(K, t.queue, t.priority), t.entry_id)
end
-- Counted like every other way a task ends (dtq_tasks_total), as an expiry before start is.
rcall('HINCRBY', K.stats_tasks, outcome_field(t.queue, t.type, 'CANCELLED'), 1)
history_add(K, now_ms, t.type, 'CANCELLED')
emit(K, 'task.cancelled', task_id, t.queue, 'CANCELLED', t.attempt, now_ms, ARGV[3])
return {CODE.OK, 'CANCELLED'}
