--[[
  Write one periodic schedule's hash and its place in the partition's periodic index: create it,
  or change its spec or state (pause, resume, a PATCH). The caller computes the next tick; the
  index holds it (+inf while paused), so the leader's due read and this write agree.
  firePeriodic-1 compare-and-sets the stored next tick, so a fire computed before this write
  fires nothing.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] schedule name  ARGV[2] mode: create (refused when it exists) | update (refused when
    it does not)  ARGV[3] owner the caller expects ("<queue>|<epoch>")  ARGV[4] now (ms)
    ARGV[5] index score: the next tick (ms), or +inf (paused)  ARGV[6..] hash field/value pairs
  Output:
    {OK, hash as flat field/value pairs}; {PERIODIC_EXISTS}; {PERIODIC_NOT_FOUND};
    {PARTITION_CLOSED} the owner key names another layout (the queue was deleted)
]]
-- #include common
local K = partition_keys(KEYS[1])
if rcall('GET', K.owner) ~= ARGV[3] then return {CODE.PARTITION_CLOSED} end
local name, mode, now_ms = ARGV[1], ARGV[2], ARGV[4]
local hkey = K.periodic_prefix .. name
local exists = rcall('EXISTS', hkey) == 1
if mode == 'create' and exists then return {CODE.PERIODIC_EXISTS} end
if mode ~= 'create' and not exists then return {CODE.PERIODIC_NOT_FOUND} end
local fields = {'updated_at', now_ms}
if mode == 'create' then fields[#fields + 1], fields[#fields + 2] = 'created_at', now_ms end
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
rcall('HSET', hkey, unpack(fields))
rcall('HINCRBY', hkey, 'rev', 1)
rcall('ZADD', K.periodic_index, ARGV[5], name)
return {CODE.OK, rcall('HGETALL', hkey)}
