--[[
  Delete a task that has ended (the schedule page's "Delete", after its cancel): its record, its
  result and its entry in the recent-tasks index, so no listing shows it again. Its retention
  list entry, if any, is left to the count trim (an id without a record is skipped there), and
  its statistics and history stay counted (it did end).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] task id
  Output:
    {CODE.OK}; {CODE.TASK_NOT_FOUND}; {CODE.EXISTING, status} when it has not ended (cancel it first)
    (codes: CODE in includes/common.lua)
]]
-- #include common
local K = partition_keys(KEYS[1])
local task_id = ARGV[1]
local status = rcall('HGET', K.task_prefix .. task_id, 'status')
if not status then return {CODE.TASK_NOT_FOUND} end
if not TERMINAL[status] then return {CODE.EXISTING, status} end
rcall('DEL', K.task_prefix .. task_id, K.result_prefix .. task_id)
rcall('ZREM', K.recent, task_id)
return {CODE.OK}
