--[[
  Forget a draining partition once it holds nothing: no stream entry (its queue's three streams),
  no pending entry, nothing scheduled or claimed by the scheduler, no RUNNING task, no dead
  letter, no workflow outbox entry (a step that ended, its workflow not advanced yet: the leader
  re-drives only the partitions it leases). Deleting the owner key closes it in the same step as the check, so a submitter still
  holding the layout from before the partition started draining cannot add work after the check
  (every script that adds work refuses a partition without its owner). The leader then removes
  the tag from the registry (reconcileQueue). Fenced on the partition's lease, so a deposed
  leader cannot close a partition that the current leader has put back into service.
  A closed partition hands its statistics over in the same step (includes/stats.lua): the leader
  adds them to the global ones, so the /metrics counters do not go back when it is forgotten.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] owner ("queue|epoch")  ARGV[2] worker id  ARGV[3] consumer group
  Output:
    {1, tasks, duration, counters} closed (or already closed: no owner), with the statistics it
    still held, now deleted (flat HGETALL replies; empty once taken); 0 it still holds something;
    CODE.LEASE_LOST when this worker does not hold the lease; CODE.PARTITION_CLOSED when another
    layout owns it
]]
-- #include common
-- #include stats
local K = partition_keys(KEYS[1])
if rcall('GET', K.lock) ~= ARGV[2] then return CODE.LEASE_LOST end
local owner = rcall('GET', K.owner)
if not owner then return {1, unpack(take_stats(K))} end
if owner ~= ARGV[1] then return CODE.PARTITION_CLOSED end
local queue = string.match(owner, '^(.*)|[^|]*$')  -- the partition's streams are its queue's
for _, priority in ipairs({'high', 'normal', 'low'}) do
  local stream = stream_key(K, queue, priority)
  if rcall('XLEN', stream) > 0 then return 0 end
  -- Entries deleted while pending stay in the PEL until a reaper drops them.
  local summary = redis.pcall('XPENDING', stream, ARGV[3])
  if type(summary) == 'table' and (tonumber(summary[1]) or 0) > 0 then return 0 end
end
for _, key in ipairs({K.schedule, K.schedule_claims, K.running}) do
  if rcall('ZCARD', key) > 0 then return 0 end
end
if rcall('XLEN', K.dlq) > 0 or rcall('HLEN', K.wf_outbox) > 0 then return 0 end
rcall('DEL', K.owner)
return {1, unpack(take_stats(K))}
