--[[
  Record the task types a starting (or long-running) worker serves, and forget types no worker
  has registered for the retention period (a type removed from the code stops being accepted).
  Types are kept while their workers are down (a deploy, an outage), so submits go on meanwhile.
  Input:
    KEYS[1] task types hash (type -> last registered, ms)
    ARGV[1] now (ms)  ARGV[2] forget before (ms)  ARGV[3..] task types
  Output:
    number of types now registered
]]
local stale = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  if tonumber(flat[i + 1]) < tonumber(ARGV[2]) then stale[#stale + 1] = flat[i] end
end
if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end
for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], ARGV[1]) end
return redis.call('HLEN', KEYS[1])
