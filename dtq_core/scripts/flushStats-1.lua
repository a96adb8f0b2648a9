--[[
  Write the statistics' samples a worker gathered from its completions (completeTasks with
  ARGV[10] = 1) into one partition's keys: its history minutes, its finished-per-minute counts
  and its run-time histogram (includes/samples.lua). A worker sends one call per partition about
  once a second instead of these writes in every completion batch. A history field comes under
  its task type's own name and is counted here under the type's series (history_type: the type
  itself, or "(other)" past the partition's HISTORY_MAX_TYPES).
  A write is numbered per worker process: a worker sends a write again, unchanged, when it does
  not know whether it landed (its reply was lost), and one applied already is not added twice.
  The partition's key samples:<writer> keeps the last number applied for an hour.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] JSON {"m": [[minute (ms since the epoch / 60000), {history field: n}, {queue: n}], ...],
                  "b": {bucket label: n}, "s": run-time sum (s)}
    ARGV[2] writer (the worker's id and a token of its process)  ARGV[3] the write's number
  Each part (a minute's history, a minute's finished counts, the histogram) is written on its
  own: one that fails (a key of the wrong type) is left out and named in the reply, and the write
  still counts as applied. Redis keeps what a script wrote before an error, so a write that
  failed midway and was sent again would add its first parts twice.
  Output:
    the number of minutes written; {that number, the first error} when a part could not be
    written (the rest was); -1 when the partition is closed or gone (a queue deleted since: its
    statistics were folded and dropped, and samples written now would outlive it); -2 when this
    write was applied already
]]
-- #include common
-- #include samples
local K = partition_keys(KEYS[1])
local owner = rcall('GET', K.owner)
if not owner or string.sub(owner, 1, 8) == 'deleted|' then return -1 end
local applied_key, number = K.samples_prefix .. ARGV[2], tonumber(ARGV[3])
if (tonumber(rcall('GET', applied_key)) or 0) >= number then return -2 end
local samples = cjson.decode(ARGV[1])
local failed = nil
local function part(f, ...)
  local ok, err = pcall(f, ...)
  if not ok and not failed then failed = error_text(err) end
end
local function write_history(minute, raw_fields)
  local fields = {}
  for raw, n in pairs(raw_fields) do
    local cut = string.find(raw, '|', 1, true)
    if cut then
      local ttype = string.sub(raw, 1, cut - 1)
      if ttype ~= HISTORY_OTHER then ttype = history_type(K, ttype) end
      local name = ttype .. string.sub(raw, cut)
      fields[name] = (fields[name] or 0) + n
    end
  end
  if next(fields) ~= nil then history_write(K, minute, fields) end
end
for _, m in ipairs(samples.m) do
  local minute = tonumber(m[1])
  part(write_history, minute, m[2])
  part(samples_write_finished, K, minute, m[3])
end
part(samples_write_duration, K, samples.b, tonumber(samples.s) or 0)
rcall('SET', applied_key, number, 'PX', 3600000)
if failed then return {#samples.m, failed} end
return #samples.m
