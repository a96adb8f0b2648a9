--[[
  Record that an operator action is about to change state (its intent), before it does: a process
  killed part-way through still leaves who started what, on which selection. The operation stays in
  the open-operations hash until finishAudit records its outcome.
  Input:
    KEYS[1] audit stream  KEYS[2] open operations (hash op id -> JSON {start, at, done})
    ARGV[1] stream cap (MAXLEN ~)  ARGV[2] operation id  ARGV[3] now (ms)  ARGV[4..] field, value, ...
  Output:
    the intent entry's id
]]
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode({start = id, at = tonumber(ARGV[3]), done = 0}))
return id
