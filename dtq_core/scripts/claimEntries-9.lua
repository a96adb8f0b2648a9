--[[
  Claim the entries takeIdleEntries took over from a silent worker: a RUNNING task at the same entry
  gets the crash-redelivery attempt increment (or goes to the DLQ when its attempts are spent).
  New entries are read and claimed in one go by fetchTasks instead.
  Input:
    KEYS[1] paused queues set   KEYS[2] events channel   KEYS[3] event seq
    KEYS[4] DLQ stream          KEYS[5] stats counters   KEYS[6] running index
    KEYS[7] per-outcome task counts (stats)   KEYS[8] task key prefix (prefix .. task id)
    KEYS[9] stream key prefix (prefix .. queue .. ':' .. priority)
    ARGV[1..7] group, worker id, now (ms), now (ISO), retention (ms), dlq enabled (1/0),
               dlq maxlen
    ARGV[8..] quads: stream (after the stream key prefix: queue:priority), entry id, task id,
               entry attempt
  Output:
    list of rows: runnable ones, as fetchTasks returns them, and for the worker's log
    {outcome, entry id, stream, task id, reason} of absorbed duplicates, lost attempts and
    quarantined entries (a corrupt task record: dead-lettered as dtq.CorruptRecord)
]]
-- #include common
-- #include claim
local ctx = claim_context(1)
local runnable = {}
for i = 8, #ARGV, 4 do
  local stream = KEYS[9] .. ARGV[i]
  local ok, row = pcall(claim_entry, ctx, stream, ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], true)
  if not ok then row = quarantine_entry(ctx, stream, ARGV[i + 1], ARGV[i + 2], row) end
  if row[1] == 'run' then
    runnable[#runnable + 1] = row
  elseif row[2] then
    runnable[#runnable + 1] = {row[1], ARGV[i + 1], stream, ARGV[i + 2], row[2]}
  end
end
return runnable
