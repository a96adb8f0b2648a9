--[[
  Pause one partition's starts until a time (a handler's RateLimited(scope="queue") in another
  partition of the same queue: the completion script paused that one, the worker then pauses the
  queue's other partitions with this). A later pause never shortens one in force.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] until (ms)
  Output:
    1 when the pause was set or lengthened, 0 when one at least as long was in force
]]
-- #include common
local K = partition_keys(KEYS[1])
local cur = tonumber(rcall('HGET', K.limits, 'pause_until') or '0') or 0
if tonumber(ARGV[1]) <= cur then return 0 end
rcall('HSET', K.limits, 'pause_until', ARGV[1])
return 1
