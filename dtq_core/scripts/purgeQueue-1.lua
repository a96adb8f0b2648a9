--[[
  Cancel up to LIMIT waiting (never delivered) entries of one priority stream of one partition,
  up to a snapshot id, so work that arrives during a purge is left alone. In-flight entries are
  not touched. A queue-wide purge calls this per partition and priority (pipelined) until each
  returns ''.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] queue  ARGV[2] priority  ARGV[3] group  ARGV[4] now (ms)  ARGV[5] now (ISO)
    ARGV[6] snapshot id (inclusive upper bound)  ARGV[7] limit  ARGV[8] start after this id
    ARGV[9] retention (includes/retain.lua: retention_policy)
  Output:
    {cancelled, last id seen or '' when done}
]]
-- #include common
-- #include purge
local K = partition_keys(KEYS[1])
history_batched = true  -- one write of the history for the whole call (purge_task)
local stream = stream_key(K, ARGV[1], ARGV[2])
local group, now_ms, now_iso, limit = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[7])
local R = retention_policy(ARGV[9])
R.defer = true  -- one count trim for the whole page
local function id_lt(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, aseq, bms, bseq = tonumber(ams), tonumber(aseq), tonumber(bms), tonumber(bseq)
  return ams < bms or (ams == bms and aseq < bseq)
end
if rcall('EXISTS', stream) == 0 then return {0, ''} end
local group_start = '0-0'
for _, g in ipairs(rcall('XINFO', 'GROUPS', stream)) do
  if field(g, 'name') == group then group_start = field(g, 'last-delivered-id') end
end
local start = ARGV[8]
if start == '' or id_lt(start, group_start) then start = group_start end
local entries = rcall('XRANGE', stream, '(' .. start, ARGV[6], 'COUNT', limit)
local cancelled, last = 0, ''
local counts = {}  -- per queue|type|cancelled field, for dtq_tasks_total (one HINCRBY each, not per task)
for _, entry in ipairs(entries) do
  last = entry[1]
  cancelled = cancelled + purge_entry(R, K, stream, entry, counts, now_ms, now_iso)
end
retain_trim(R, K, now_ms)
for counted, n in pairs(counts) do rcall('HINCRBY', K.stats_tasks, counted, n) end
history_flush(K, now_ms)
if #entries < limit then last = '' end
return {cancelled, last}
