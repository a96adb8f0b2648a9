--[[
  Record that an operator action is about to change state (its intent), before it does: a process
  killed part-way through still leaves who started what, on which selection. The operation stays in
  the open-operations hash until finishAudit records its outcome, or until its intent entry has
  been trimmed from the audit stream (then nothing could show it: it is dropped here).
  Both keys carry the {audit} hash tag, so they are in one slot (Redis Cluster).
  Input:
    KEYS[1] audit stream  KEYS[2] open operations (hash op id -> JSON {start, at, done})
    ARGV[1] stream cap (MAXLEN ~)  ARGV[2] operation id  ARGV[3] now (ms)  ARGV[4..] field, value, ...
  Output:
    the intent entry's id
]]
local function id_before(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if not ams or not bms then return false end
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and tonumber(aseq) < tonumber(bseq))
end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
if oldest then
  local open = redis.call('HGETALL', KEYS[2])
  for i = 1, #open, 2 do
    local ok, op = pcall(cjson.decode, open[i + 1])
    if not ok or type(op) ~= 'table' or type(op.start) ~= 'string' or id_before(op.start, oldest[1]) then
      redis.call('HDEL', KEYS[2], open[i])
    end
  end
end
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode({start = id, at = tonumber(ARGV[3]), done = 0}))
return id
