--[[
  Claim the entries takeIdleEntries took over from a silent worker, in one partition: a RUNNING
  task at the same entry gets the crash-redelivery attempt increment (or goes to the DLQ when its
  attempts are spent). New entries are read and claimed in one go by fetchTasks instead.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1..7] group, worker id, now (ms), now (ISO), retention (retain.lua), dlq enabled (1/0),
               dlq maxlen
    ARGV[8..] quads: stream (after the partition's stream key prefix: queue:priority), entry id,
               task id, entry attempt
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
  local stream = ctx.K.stream_prefix .. ARGV[i]
  local ok, row = pcall(claim_entry, ctx, stream, ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], true)
  if not ok then row = quarantine_entry(ctx, stream, ARGV[i + 1], ARGV[i + 2], row) end
  if row[1] == 'run' then
    runnable[#runnable + 1] = row
  elseif row[2] then
    runnable[#runnable + 1] = {row[1], ARGV[i + 1], stream, ARGV[i + 2], row[2]}
  end
end
return runnable
