--[[
  Open one partition of a registered queue: its owner key names the queue and the layout's epoch,
  and its three streams have the consumer group (from id 0, so nothing added before is skipped).
  Idempotent for the same owner. A partition left by a delete of the same epoch (a tombstone,
  "deleted|<queue>|<epoch>") stays closed: only a new registration (a new epoch) opens it again,
  so a submitter holding the deleted queue's layout cannot bring it back.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] owner ("queue|epoch")  ARGV[2] queue  ARGV[3] consumer group
  Output:
    OK, or PARTITION_CLOSED (owned by another layout, or a tombstone of this one)
]]
-- #include common
local K = partition_keys(KEYS[1])
local current = rcall('GET', K.owner)
if current == ARGV[1] then return CODE.OK end
-- A live partition of another layout is never taken over; a tombstone of this very layout means
-- the queue was deleted after this caller read it. A tombstone of an older layout is reused.
if current and (string.sub(current, 1, 8) ~= 'deleted|' or current == 'deleted|' .. ARGV[1]) then
  return CODE.PARTITION_CLOSED
end
rcall('SET', K.owner, ARGV[1])
for _, priority in ipairs({'high', 'normal', 'low'}) do
  pcall(rcall, 'XGROUP', 'CREATE', stream_key(K, ARGV[2], priority), ARGV[3], '0', 'MKSTREAM')
end
return CODE.OK
