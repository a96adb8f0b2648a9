--[[
  Hand entries of one partition back at shutdown, once their handlers have stopped: make each entry that is still
  ours look idle for the visibility timeout, so a peer's next reaper round takes it (and charges
  the lost attempt) instead of waiting out a timeout after this worker's last heartbeat. An entry
  acknowledged meanwhile, or already taken by a peer, is left alone.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] group   ARGV[2] worker id   ARGV[3] idle to set (ms)
    ARGV[4..] pairs: stream (after the partition's stream key prefix: queue:priority), entry id
  Output:
    number of entries handed back
]]
-- #include common
local K = partition_keys(KEYS[1])
local released = 0
for i = 4, #ARGV, 2 do
  local stream, entry_id = K.stream_prefix .. ARGV[i], ARGV[i + 1]
  local info = redis.pcall('XPENDING', stream, ARGV[1], entry_id, entry_id, 1)
  if not info.err and info[1] and info[1][2] == ARGV[2] then
    rcall('XCLAIM', stream, ARGV[1], ARGV[2], 0, entry_id, 'IDLE', ARGV[3], 'JUSTID')
    released = released + 1
  end
end
return released
