--[[
  Hand the scheduler lock back on shutdown, only if this worker holds it.
  Input:
    KEYS[1] lock  ARGV[1] worker id
  Output:
    1 released; 0 not ours
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
