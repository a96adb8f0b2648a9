--[[
  Read up to COUNT new entries from the worker's ready queues in priority order (every queue's
  high stream, then normal, then low) and claim each one: QUEUED -> RUNNING for runnable
  entries, absorbing duplicates, expiring stale ones. One round trip for a whole batch. An idle
  worker sends it right behind a BLPOP on its wake list(s), so waking up and claiming cost one
  round trip; a read that got all it asked for rings again, so an idle worker comes for the rest.
  Only queues in the ready set are read, so an idle fetch costs the same however many queues
  exist. A paused queue is not read at all (checked here, in the same script as the read, so a
  pause that lands between two fetches is always seen): it leaves the ready set, and resuming
  puts it back. Its entries keep their place in its streams.
  Input:
    KEYS[1] paused queues set   KEYS[2] events channel   KEYS[3] event seq
    KEYS[4] DLQ stream          KEYS[5] stats counters   KEYS[6] running index
    KEYS[7] per-outcome task counts (stats)   KEYS[8] task key prefix (prefix .. task id)
    KEYS[9] ready queues set    KEYS[10] shared wake list
    KEYS[11] stream key prefix (prefix .. queue .. ':' .. priority)
    KEYS[12] wake key prefix (prefix .. queue)
    ARGV[1..7] group, worker id, now (ms), now (ISO), retention (ms), dlq enabled (1/0),
               dlq maxlen; an empty now (ms) takes Redis's clock, for a
               fetch queued behind a blocking wait
    ARGV[8] count   ARGV[9..] the queues this worker serves (none: every queue)
  Output:
    list of runnable rows {'run', entry_id, stream, task_id, attempt, max_attempts, type,
    payload, timeout_s, queue, priority, handler ('' = the type's own)}, and for the worker's log {outcome, entry_id,
    stream, task_id, reason} of entries settled here: 'absorbed' duplicates, and 'quarantined'
    ones whose task record is corrupt (dead-lettered as dtq.CorruptRecord, see quarantine)
]]
-- #include common
-- #include claim
local PRIORITIES = {'high', 'normal', 'low'}  -- dtq_core.keys.PRIORITIES, served in this order
local ctx = claim_context(1)
local ready_key, shared_wake, stream_prefix, wake_prefix = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local remaining = tonumber(ARGV[8])

local candidates = {}
if #ARGV >= 9 then
  for i = 9, #ARGV do
    if rcall('SISMEMBER', ready_key, ARGV[i]) == 1 then candidates[#candidates + 1] = ARGV[i] end
  end
else
  candidates = rcall('SMEMBERS', ready_key)
end
table.sort(candidates)
local queues = {}
for _, queue in ipairs(candidates) do
  if is_paused(ctx, queue) then rcall('SREM', ready_key, queue) else queues[#queues + 1] = queue end
end

local function read(stream, count)
  local reply = redis.pcall('XREADGROUP', 'GROUP', ctx.group, ctx.worker_id, 'COUNT', count,
                            'STREAMS', stream, '>')
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'NOGROUP', 1, true) then return error(reply.err) end
    -- The stream lost its group (deleted by hand, or re-created by an XADD after its queue was
    -- deleted): recreate it from the start, so nothing in it is skipped, and read again.
    rcall('XGROUP', 'CREATE', stream, ctx.group, '0', 'MKSTREAM')
    reply = rcall('XREADGROUP', 'GROUP', ctx.group, ctx.worker_id, 'COUNT', count, 'STREAMS', stream, '>')
  end
  return reply
end

local runnable = {}
local more = {}  -- queues with a stream that gave all that was asked of it, so it may hold more
local streams_read = {}
for _, priority in ipairs(PRIORITIES) do
  for _, queue in ipairs(queues) do
    if remaining <= 0 then break end
    local stream = stream_prefix .. queue .. ':' .. priority
    local asked = remaining
    local reply = read(stream, asked)
    streams_read[queue] = (streams_read[queue] or 0) + 1
    if reply then
      if #reply[1][2] >= asked then more[queue] = true end
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
end
for _, queue in ipairs(queues) do
  if more[queue] then
    -- More may wait (a full batch, or a read that was all duplicates): wake an idle worker of
    -- the queue, this one included (at worst it finds nothing: one empty fetch).
    ring(wake_prefix .. queue, ready_key, shared_wake, queue)
  elseif streams_read[queue] == #PRIORITIES then
    -- Every stream read to its end: nothing new is left until the next entry rings it again.
    rcall('SREM', ready_key, queue)
  end
end
return runnable
