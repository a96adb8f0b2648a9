--[[
  Read up to COUNT new entries from the given streams in priority order and claim each one:
  QUEUED -> RUNNING for runnable entries, absorbing duplicates, expiring stale ones. One round
  trip for a whole batch. An idle worker sends it right behind a BLPOP on its queues' wake
  lists, so waking up and claiming cost one round trip; a read that got all it asked for rings
  the wake list again, so an idle worker comes for the rest.
  Input:
    KEYS[1] paused queues set   KEYS[2] events channel   KEYS[3] event seq
    KEYS[4] DLQ stream          KEYS[5] stats counters   KEYS[6] running index
    KEYS[7] per-outcome task counts (stats)
    ARGV[1..8] group, worker id, now (ms), now (ISO), retention (ms), task key prefix,
               dlq enabled (1/0), dlq maxlen; an empty now (ms) takes Redis's clock, for a
               fetch queued behind a blocking wait
    ARGV[9] count   ARGV[10] wake key prefix   ARGV[11..] stream keys, highest priority first
  Output:
    list of runnable rows {'run', entry_id, stream, task_id, attempt, max_attempts, type,
    payload, timeout_s, queue, priority, handler ('' = the type's own)}, and for the worker's log {outcome, entry_id,
    stream, task_id, reason} of entries settled here: 'absorbed' duplicates, and 'quarantined'
    ones whose task record is corrupt (dead-lettered as dtq.CorruptRecord, see quarantine)
]]
-- #include common
-- #include claim
local ctx = claim_context(1)
local remaining = tonumber(ARGV[9])
local runnable = {}
local more = {}  -- queues with a stream that gave all that was asked of it, so it may hold more
for i = 11, #ARGV do
  if remaining <= 0 then break end
  local stream = ARGV[i]
  local asked = remaining
  local reply = rcall('XREADGROUP', 'GROUP', ctx.group, ctx.worker_id, 'COUNT', asked,
                      'STREAMS', stream, '>')
  if reply then
    if #reply[1][2] >= asked then more[string.match(stream, ':([^:]+):[^:]+$')] = true end
    for _, entry in ipairs(reply[1][2]) do
      local fields = entry[2]
      local task_id, attempt
      for f = 1, #fields, 2 do
        if fields[f] == 'task_id' then task_id = fields[f + 1]
        elseif fields[f] == 'attempt' then attempt = fields[f + 1] end
      end
      local row, ok
      if task_id then
        ok, row = pcall(claim_entry, ctx, stream, entry[1], task_id, attempt or '1', false)
        if not ok then row = quarantine_entry(ctx, stream, entry[1], task_id, row) end
      else
        finish_entry(ctx, stream, entry[1])
        row = {'missing'}
      end
      if row[1] == 'run' then
        runnable[#runnable + 1] = row
        remaining = remaining - 1
      elseif row[2] then  -- settled here (absorbed duplicate, quarantined): reported for the worker's log
        runnable[#runnable + 1] = {row[1], entry[1], stream, task_id, row[2]}
      end
    end
  end
end
-- More may wait in these queues (a full batch, or a read that was all duplicates): wake an idle
-- worker of each, this one included (at worst it finds nothing: one empty fetch).
for queue in pairs(more) do ring(ARGV[10] .. queue) end
return runnable
