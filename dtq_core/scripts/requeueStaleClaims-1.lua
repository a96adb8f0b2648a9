--[[
  Return one partition's scheduler claims older than the cutoff to its schedule: the leader that
  took them died before queueing them. Duplicates this may create are absorbed downstream. Fenced
  on the partition's lease: a leader paused past its lease returns nothing.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] cutoff (ms)  ARGV[2] now (ms)  ARGV[3] worker id
  Output:
    number of claims returned, or CODE.LEASE_LOST when this worker does not hold the lease
]]
-- #include common
local K = partition_keys(KEYS[1])
if rcall('GET', K.lock) ~= ARGV[3] then return CODE.LEASE_LOST end
local ids = rcall('ZRANGEBYSCORE', K.schedule_claims, '-inf', ARGV[1], 'LIMIT', 0, 1000)
for _, id in ipairs(ids) do
  if not rcall('ZSCORE', K.schedule, id) then
    schedule_add(K.schedule, ARGV[2], id, rcall('HGET', K.task_prefix .. id, 'queue') or '')
  end
  rcall('ZREM', K.schedule_claims, id)
end
return #ids
