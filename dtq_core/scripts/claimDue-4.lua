--[[
  Take due entries out of the schedule into the claims zset (scored by claim time), for the
  scheduler leader only: a deposed leader whose lock expired claims nothing.
  Input:
    KEYS[1] schedule  KEYS[2] schedule claims  KEYS[3] scheduler lock
    KEYS[4] task key prefix (prefix .. task id)
    ARGV[1] worker id  ARGV[2] now (ms)  ARGV[3] limit
  Output:
    the claimed task ids, or CODE.LEASE_LOST when this worker does not hold the lock
]]
-- #include common
if rcall('GET', KEYS[3]) ~= ARGV[1] then return CODE.LEASE_LOST end
local ids = rcall('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do
  schedule_rem(KEYS[1], id, rcall('HGET', KEYS[4] .. id, 'queue') or '')
  rcall('ZADD', KEYS[2], ARGV[2], id)
end
return ids
