--[[
  Replace a hash with the given fields and TTL in one step, so a reader never sees it half
  written (the leader's global history roll-up, dtq_core/worker/history.py, recomputes the last
  minutes from every partition and writes each minute whole).
  Input:
    KEYS[1] the hash
    ARGV[1] TTL (ms)  ARGV[2..] field, value, field, value, ...
  Output:
    the number of fields written (0: the key is deleted)
]]
local rcall = redis.call
rcall('DEL', KEYS[1])
if #ARGV < 3 then return 0 end
for i = 2, #ARGV, 1000 do
  rcall('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
rcall('PEXPIRE', KEYS[1], ARGV[1])
return (#ARGV - 1) / 2
