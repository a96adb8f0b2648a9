--[[
  Take due entries out of one partition's schedule into its claims zset (scored by claim time),
  for the holder of the partition's lease only: a deposed leader whose lease expired claims nothing.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] worker id  ARGV[2] now (ms)  ARGV[3] limit
  Output:
    the claimed task ids, or CODE.LEASE_LOST when this worker does not hold the partition's lease
]]
-- #include common
local K = partition_keys(KEYS[1])
if rcall('GET', K.lock) ~= ARGV[1] then return CODE.LEASE_LOST end
local ids = rcall('ZRANGEBYSCORE', K.schedule, '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do
  schedule_rem(K.schedule, id, rcall('HGET', K.task_prefix .. id, 'queue') or '')
  rcall('ZADD', K.schedule_claims, ARGV[2], id)
end
return ids
