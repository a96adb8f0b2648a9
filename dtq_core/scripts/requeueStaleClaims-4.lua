--[[
  Return scheduler claims older than the cutoff to the schedule: the leader that took them
  died before queueing them. Duplicates this may create are absorbed downstream. Fenced on the
  lock: a leader paused past its lock returns nothing.
  Input:
    KEYS[1] schedule claims  KEYS[2] schedule  KEYS[3] scheduler lock
    KEYS[4] task key prefix (prefix .. task id)
    ARGV[1] cutoff (ms)  ARGV[2] now (ms)  ARGV[3] worker id
  Output:
    number of claims returned, or CODE.LEASE_LOST when this worker does not hold the lock
]]
-- #include common
if rcall('GET', KEYS[3]) ~= ARGV[3] then return CODE.LEASE_LOST end
local ids = rcall('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)
for _, id in ipairs(ids) do
  if not rcall('ZSCORE', KEYS[2], id) then
    schedule_add(KEYS[2], ARGV[2], id, rcall('HGET', KEYS[4] .. id, 'queue') or '')
  end
  rcall('ZREM', KEYS[1], id)
end
return #ids
