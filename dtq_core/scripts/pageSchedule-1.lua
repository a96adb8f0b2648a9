--[[
  One partition's share of a page of the schedule, soonest first, resuming after the last task of
  the page before. Read-only. The page merges every partition's share in the order
  (due ms, task id), the order a zset keeps its members of one score. Tasks often share a due
  millisecond (delayed submits of one batch), so the cursor names the last task shown, not only
  its time; the rank of that task and the read after it happen together here, while the
  scheduler removes due tasks from the front of the set.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] due ms of the last task shown ('' = from the start)
    ARGV[2] that task's id when it is of this partition ('' otherwise)
    ARGV[3] how many to read
    ARGV[4] 1 when this partition's tasks of that millisecond sort after the last task shown
            (its tag sorts after the last task's), so they are on the page; 0 when before
  Output:
    flat member/score pairs, as ZRANGE ... WITHSCORES. When the last task was of this partition
    and has left the schedule, the share starts after its millisecond: others of that
    millisecond are then not shown, which is what a whole due batch leaving together looks like.
]]
-- #include common
local key = partition_keys(KEYS[1]).schedule
local due, after, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
if due == '' then
  return rcall('ZRANGE', key, 0, count - 1, 'WITHSCORES')
end
if after ~= '' then
  local at = rcall('ZSCORE', key, after)
  if at and tonumber(at) == tonumber(due) then
    local rank = rcall('ZRANK', key, after)
    return rcall('ZRANGE', key, rank + 1, rank + count, 'WITHSCORES')
  end
elseif ARGV[4] == '1' then
  return rcall('ZRANGE', key, due, '+inf', 'BYSCORE', 'LIMIT', 0, count, 'WITHSCORES')
end
return rcall('ZRANGE', key, '(' .. due, '+inf', 'BYSCORE', 'LIMIT', 0, count, 'WITHSCORES')
