--[[
  Write one periodic schedule's hash and its place in the partition's periodic index: create it,
  or change its spec or state (a PATCH, a pause). A change is a compare-and-set on the schedule's
  revision, so two operators changing it at once (two API processes) cannot overwrite each other:
  the one whose read was overtaken writes nothing, and reads again. The index score follows from
  the hash as written (+inf while paused, else its next tick), never from the caller, so that a
  schedule shown running is one the leader finds due. firePeriodic-1 compare-and-sets the
  revision too, so a fire computed before this write fires nothing.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] schedule name  ARGV[2] mode: create (refused when it exists) | update (refused when
    it does not)  ARGV[3] owner the caller expects ("<queue>|<epoch>")  ARGV[4] now (ms)
    ARGV[5] update: the revision the caller read (create: ignored)  ARGV[6..] hash field/value pairs
  Output:
    {OK, hash as flat field/value pairs, 1}; {OK, {}, 0} stale: the revision is no longer the one
    read, nothing written; {PERIODIC_EXISTS}; {PERIODIC_NOT_FOUND};
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
if mode ~= 'create' and (rcall('HGET', hkey, 'rev') or '0') ~= ARGV[5] then return {CODE.OK, {}, 0} end
local fields = {'updated_at', now_ms}
if mode == 'create' then fields[#fields + 1], fields[#fields + 2] = 'created_at', now_ms end
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
rcall('HSET', hkey, unpack(fields))
rcall('HINCRBY', hkey, 'rev', 1)
local s = read_task(hkey, 'paused', 'next')
local score = '+inf'
if s.paused ~= '1' and tonumber(s.next) then score = s.next end
rcall('ZADD', K.periodic_index, score, name)
return {CODE.OK, rcall('HGETALL', hkey), 1}
