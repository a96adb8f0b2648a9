--[[
  Remove one periodic schedule from its partition: its hash and its index entry, together, so the
  leader never reads one without the other. Tasks it fired are left alone. A move to another
  queue removes it only as it was read (its revision), so a change made meanwhile is not lost by
  the move carrying the older state.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] schedule name  ARGV[2] the revision the caller read ('' = whatever it is: a delete)
  Output:
    {OK, the hash as it was (flat field/value pairs), 1}; {OK, {}, 0} stale: the revision is no
    longer the one read, nothing removed; {PERIODIC_NOT_FOUND}
]]
-- #include common
local K = partition_keys(KEYS[1])
local hkey = K.periodic_prefix .. ARGV[1]
local was = rcall('HGETALL', hkey)
if #was > 0 and ARGV[2] ~= '' and (rcall('HGET', hkey, 'rev') or '0') ~= ARGV[2] then return {CODE.OK, {}, 0} end
rcall('ZREM', K.periodic_index, ARGV[1])
if #was == 0 then return {CODE.PERIODIC_NOT_FOUND} end
rcall('DEL', hkey)
return {CODE.OK, was, 1}
