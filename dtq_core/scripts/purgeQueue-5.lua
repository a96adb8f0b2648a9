--[[
  Cancel up to LIMIT waiting (never delivered) entries of one stream, up to a snapshot id, so
  work that arrives during a purge is left alone. In-flight entries are not touched.
  Input:
    KEYS[1] stream  KEYS[2] events channel  KEYS[3] event seq  KEYS[4] per-outcome task counts (stats)
    KEYS[5] task key prefix (prefix .. task id)
    ARGV[1] group  ARGV[2] now (ms)  ARGV[3] now (ISO)
    ARGV[4] snapshot id (inclusive upper bound)  ARGV[5] limit  ARGV[6] start after this id
    ARGV[7] retention (ms)
  Output:
    {cancelled, last id seen or '' when done}
]]
-- #include common
local function id_lt(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, aseq, bms, bseq = tonumber(ams), tonumber(aseq), tonumber(bms), tonumber(bseq)
  return ams < bms or (ams == bms and aseq < bseq)
end
if rcall('EXISTS', KEYS[1]) == 0 then return {0, ''} end
local group_start = '0-0'
for _, g in ipairs(rcall('XINFO', 'GROUPS', KEYS[1])) do
  if field(g, 'name') == ARGV[1] then group_start = field(g, 'last-delivered-id') end
end
local start = ARGV[6]
if start == '' or id_lt(start, group_start) then start = group_start end
local entries = rcall('XRANGE', KEYS[1], '(' .. start, ARGV[4], 'COUNT', ARGV[5])
local cancelled, last = 0, ''
local counts = {}  -- per queue|type|cancelled field, for dtq_tasks_total (one HINCRBY each, not per task)
for _, entry in ipairs(entries) do
  last = entry[1]
  local task_id = field(entry[2], 'task_id')
  local tkey = KEYS[5] .. (task_id or '')
  local t = read_task(tkey, 'status', 'queue', 'attempt', 'entry_id', 'type')
  if t.status == 'QUEUED' and t.entry_id == entry[1] then
    rcall('HSET', tkey, 'status', 'CANCELLED', 'cancel_requested', '1', 'finished_at', ARGV[2],
          'updated_at', ARGV[2], 'last_error', 'purged')
    rcall('PEXPIRE', tkey, ARGV[7])
    local counted = outcome_field(t.queue, t.type, 'CANCELLED')
    counts[counted] = (counts[counted] or 0) + 1
    emit(KEYS[2], KEYS[3], 'task.cancelled', task_id, t.queue, 'CANCELLED', t.attempt, ARGV[2], ARGV[3])
    cancelled = cancelled + 1
  end
  rcall('XDEL', KEYS[1], entry[1])
end
for counted, n in pairs(counts) do rcall('HINCRBY', KEYS[4], counted, n) end
if #entries < tonumber(ARGV[5]) then last = '' end
return {cancelled, last}
