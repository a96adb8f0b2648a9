--[[
  Record an operator action's outcome (how many it changed, or why it stopped) and close it.
  Both keys carry the {audit} hash tag, so they are in one slot (Redis Cluster).
  Input:
    KEYS[1] audit stream  KEYS[2] open operations (hash op id -> JSON)
    ARGV[1] stream cap (MAXLEN ~)  ARGV[2] operation id  ARGV[3..] field, value, ...
  Output:
    the outcome entry's id
]]
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
redis.call('HDEL', KEYS[2], ARGV[2])
return id
