--[[
  Renew the scheduler lock only while this worker still holds it (compare and renew).
  Input:
    KEYS[1] lock  ARGV[1] worker id  ARGV[2] ttl (ms)
  Output:
    1 renewed; 0 the lock belongs to someone else or expired
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
