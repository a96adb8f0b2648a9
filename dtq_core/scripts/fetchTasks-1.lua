--[[
  Read up to COUNT new entries of one queue partition, its high stream first, then normal, then
  low, and claim each one: QUEUED -> RUNNING for runnable entries, absorbing duplicates, expiring
  stale ones. The worker sends one call per ready partition, all pipelined in one write per node.
  The partition's ready flag is cleared here when the three streams were read to their end
  (nothing is left that no worker has read: the next entry sets the flag again and publishes the
  tag on the wake channel, see ring in common.lua) or when the partition is paused (its entries
  keep their place; resuming rings it). The reply says whether it was cleared, so that the worker
  drops the partition from its own ready set (dtq_core/worker/wake.py). A read that got all it
  asked for leaves the flag set: more may wait, and every worker still counts the partition ready.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1..7] group, worker id, now (ms), now (ISO), retention (retain.lua), dlq enabled (1/0),
               dlq maxlen (an empty now takes Redis's clock)
    ARGV[8] count, or "count:now": of those, how many the worker can start at once (its free
            slots' share; the rest would wait in its backlog). A queue whose limits count starts
            in a time window (rate, group_rate) gets no more than `now` claims: its claim is its
            start, so a row claimed ahead and started later cannot overrun the window.
    ARGV[9] the partition's owner as the worker knows it ("queue|epoch")
    ARGV[10] events (1/0: publish task events, see events_on in common.lua)
    ARGV[11..] the partition's streams after its stream key prefix ("queue:priority"), in the
               order they are served (high, normal, low)
  Output:
    {drained, rows}, {drained, rows, wait_ms} or {drained, rows, 0, claimed_ms}, and for a queue
    with a rate or group_rate limit {drained, rows, wait_ms, claimed_ms or 0, 1}: drained 1 when
    the ready flag was cleared, 0 when more may wait; wait_ms (only when the queue's limits let
    nothing start, includes/limits.lua): ms until a rate token frees or a handler's pause ends,
    0 when a freed slot will ring the partition; claimed_ms (only when the call took Redis's
    clock, an empty now: a fetch queued behind a wait): the time of the claims; rows:
    runnable ones {'run', entry_id, stream, task_id, attempt, max_attempts, type, payload,
    timeout_s, queue, priority, handler ('' = the type's own), headers, workflow context
    ('' or "<workflow id>|<step>|<input JSON>": includes/claim.lua)}, and for the worker's log
    {outcome, entry_id, stream, task_id, reason} of entries settled here: 'absorbed' duplicates,
    and 'quarantined' ones whose task record is corrupt (dead-lettered as dtq.CorruptRecord)
]]
-- #include common
-- #include claim
local ctx = claim_context(1)
local K = ctx.K
local sep = string.find(ARGV[8], ':', 1, true)
local remaining = tonumber(sep and string.sub(ARGV[8], 1, sep - 1) or ARGV[8])
local start_now = sep and tonumber(string.sub(ARGV[8], sep + 1)) or remaining
events_on = ARGV[10] ~= '0'
events_pending = {}
-- The running index gets the batch's claims in one ZADD at the end (claim_entry defers them).
ctx.started = {}

if is_paused(ctx) then
  -- A paused queue is not read at all (checked in the same script as the read, so a pause that
  -- lands between two fetches is always seen).
  clear_ready(K)
  return {1, {}}
end

-- Flow control (includes/limits.lua): the queue's limits cap this fetch before any read.
local lim = limits_read(K)
local lim_now = tonumber(ctx.now_ms)
local rated = lim and (lim.rate_n or lim.grate_n) and 1 or 0
if lim then
  if rated == 1 then
    -- Starts are counted here, at the claim: claim only what starts at once (no backlog).
    if start_now <= 0 then return {0, {}, 0, 0, 1} end  -- the flag stays: a free slot fetches it
    remaining = math.min(remaining, start_now)
  end
  local allowed, wait_ms = limits_allowance(K, lim, remaining, lim_now)
  if allowed <= 0 then
    -- Nothing may start: clear the flag (a freed slot rings again); the reply says how long
    -- until a token frees, so the worker sleeps that long instead of fetching.
    clear_ready(K)
    limits_throttled(K, 1)
    if rated == 1 then return {1, {}, wait_ms, 0, 1} end
    return {1, {}, wait_ms}
  end
  remaining = allowed
  ctx.lim, ctx.lim_now, ctx.lim_started = lim, lim_now, {}
end

local function read(stream, count)
  local reply = redis.pcall('XREADGROUP', 'GROUP', ctx.group, ctx.worker_id, 'COUNT', count,
                            'STREAMS', stream, '>')
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'NOGROUP', 1, true) then return error(reply.err) end
    -- The stream lost its group (deleted by hand, or re-created by an XADD): recreate it from the
    -- start, so nothing in it is skipped, and read again; but only in a partition that is still
    -- the queue's (never bring back a stream in a partition a delete closed).
    if rcall('GET', K.owner) ~= ARGV[9] then return false end
    rcall('XGROUP', 'CREATE', stream, ctx.group, '0', 'MKSTREAM')
    reply = rcall('XREADGROUP', 'GROUP', ctx.group, ctx.worker_id, 'COUNT', count, 'STREAMS', stream, '>')
  end
  return reply
end

local rows = {}
local more = false  -- a stream gave all that was asked of it: it may hold more
local read_all = true
for i = 11, #ARGV do
  if remaining <= 0 then
    read_all = false
    break
  end
  local stream = K.stream_prefix .. ARGV[i]
  local asked = remaining
  local reply = read(stream, asked)
  if reply then
    if #reply[1][2] >= asked then more = true end
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
        rows[#rows + 1] = row
        remaining = remaining - 1
      elseif row[2] then  -- settled here (absorbed duplicate, quarantined): reported for the worker's log
        rows[#rows + 1] = {row[1], entry[1], stream, task_id, row[2]}
      end
    end
  end
end
if #ctx.started > 0 then rcall('ZADD', K.running, unpack(ctx.started)) end
if lim then limits_started(K, lim, ctx.lim_started, lim_now) end
emit_flush(K)
local drained = 0
if read_all and not more then
  -- Every stream read to its end: nothing new is left until the next entry rings the partition.
  clear_ready(K)
  drained = 1
elseif redis.pcall('EXISTS', K.wake_list) == 0 then
  -- More may wait: pass a token on to an idle worker blocked on the wake list, so idle workers
  -- join a backlog one after another, each in its turn (pcall: a list overwritten by hand).
  redis.pcall('RPUSH', K.wake_list, '1')
end
-- Queued behind a wait, the claims took Redis's clock: say when, so the worker can tell a claim
-- it reads long after it was made (it was frozen meanwhile) from a fresh one.
if rated == 1 then return {drained, rows, 0, ctx.server_clock and ctx.now_ms or 0, 1} end
if ctx.server_clock then return {drained, rows, 0, ctx.now_ms} end
return {drained, rows}
