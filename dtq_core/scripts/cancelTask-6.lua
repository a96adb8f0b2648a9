--[[
  Cancel a task: waiting ones (PENDING, QUEUED, RETRYING) become CANCELLED at once and never
  start; for a RUNNING one the request is recorded for the owning worker's cancel watcher. A
  QUEUED task's stream entry is deleted, so it stops counting toward the depth gate (it is never
  pending anywhere: delivery and claim happen in one script).
  Input:
    KEYS[1] task hash  KEYS[2] schedule  KEYS[3] events channel  KEYS[4] event seq
    KEYS[5] per-outcome task counts (stats)
    KEYS[6] stream key prefix (prefix .. queue .. ':' .. priority)
    ARGV[1] task id  ARGV[2] now (ms)  ARGV[3] now (ISO)  ARGV[4] retention (ms)
  Output:
    {OK, 'CANCELLED'} cancelled now; {CANCEL_SIGNALLED, 'RUNNING'} cancel recorded;
    {CANCEL_REQUESTED, 'RUNNING'} a cancel is already in flight; {TASK_TERMINAL, status} already
    terminal; {TASK_NOT_FOUND} no such task (codes: CODE in includes/common.lua)
]]
-- #include common
local t = read_task(KEYS[1], 'status', 'queue', 'attempt', 'cancel_requested', 'priority', 'entry_id', 'type')
local status = t.status
if not status then return {CODE.TASK_NOT_FOUND} end
if TERMINAL[status] then return {CODE.TASK_TERMINAL, status} end
if status == 'RUNNING' then
  if t.cancel_requested == '1' then return {CODE.CANCEL_REQUESTED, status} end
  rcall('HSET', KEYS[1], 'cancel_requested', '1', 'updated_at', ARGV[2])
  return {CODE.CANCEL_SIGNALLED, status}
end
rcall('HSET', KEYS[1], 'status', 'CANCELLED', 'cancel_requested', '1', 'finished_at', ARGV[2],
      'updated_at', ARGV[2])
rcall('PEXPIRE', KEYS[1], ARGV[4])
schedule_rem(KEYS[2], ARGV[1], t.queue)
if status == 'QUEUED' and t.entry_id and t.entry_id ~= '' then
  rcall('XDEL', KEYS[6] .. t.queue .. ':' .. t.priority, t.entry_id)
end
-- Counted like every other way a task ends (dtq_tasks_total), as an expiry before start is.
rcall('HINCRBY', KEYS[5], outcome_field(t.queue, t.type, 'CANCELLED'), 1)
emit(KEYS[3], KEYS[4], 'task.cancelled', ARGV[1], t.queue, 'CANCELLED', t.attempt, ARGV[2], ARGV[3])
return {CODE.OK, 'CANCELLED'}
