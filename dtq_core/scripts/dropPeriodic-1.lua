--[[
  Remove one periodic schedule from its partition: its hash and its index entry, together, so the
  leader never reads one without the other. Tasks it fired are left alone.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] schedule name
  Output:
    {OK, the hash as it was (flat field/value pairs)}; {PERIODIC_NOT_FOUND}
]]
-- #include common
local K = partition_keys(KEYS[1])
local hkey = K.periodic_prefix .. ARGV[1]
local was = rcall('HGETALL', hkey)
rcall('ZREM', K.periodic_index, ARGV[1])
if #was == 0 then return {CODE.PERIODIC_NOT_FOUND} end
rcall('DEL', hkey)
return {CODE.OK, was}
