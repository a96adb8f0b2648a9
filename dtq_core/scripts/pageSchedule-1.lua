--[[
  One page of the schedule, soonest first, resuming just after the last task of the page before.
  Read-only. Tasks often share a due millisecond (delayed submits of one batch, many tasks set
  for one moment), so the cursor names the last task, not only its time; the rank of that task
  and the read after it happen together here, while the scheduler removes due tasks from the
  front of the set.
  Input:
    KEYS[1] schedule zset (score: due ms)
    ARGV[1] due ms of the last task shown ('' = from the start)   ARGV[2] its task id ('' = none)
    ARGV[3] how many to read
  Output:
    flat member/score pairs, as ZRANGE ... WITHSCORES. When the last task has left the schedule
    (or was not named), the page starts after its millisecond: others of that millisecond are
    then not shown, which is what a whole due batch leaving together looks like anyway.
]]
local key, due, after, count = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if due == '' then
  return redis.call('ZRANGE', key, 0, count - 1, 'WITHSCORES')
end
if after ~= '' then
  local at = redis.call('ZSCORE', key, after)
  if at and tonumber(at) == tonumber(due) then
    local rank = redis.call('ZRANK', key, after)
    return redis.call('ZRANGE', key, rank + 1, rank + count, 'WITHSCORES')
  end
end
return redis.call('ZRANGEBYSCORE', key, '(' .. due, '+inf', 'WITHSCORES', 'LIMIT', 0, count)
