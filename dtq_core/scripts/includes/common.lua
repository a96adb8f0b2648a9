-- Shared helpers, inlined by the loader where a script says: -- #include common
local rcall = redis.call

-- Return codes, mirrored by dtq_core.errors.ErrorCode (a test keeps the two equal). A negative
-- code is a refusal that changed nothing; raise_for_code turns it into its DtqError.
local CODE = {OK = 0, EXISTING = 1, CANCEL_SIGNALLED = 2, TASK_NOT_FOUND = -1, TASK_TERMINAL = -2,
              CANCEL_REQUESTED = -3, QUEUE_NOT_FOUND = -4, QUEUE_NOT_EMPTY = -5, QUEUE_FULL = -6,
              QUEUE_LIMIT_REACHED = -7, LEASE_LOST = -8,
              PARTITION_CLOSED = -9, PERIODIC_NOT_FOUND = -10, PERIODIC_EXISTS = -11}

local TERMINAL = {SUCCEEDED = true, FAILED = true, DEAD_LETTERED = true, CANCELLED = true, EXPIRED = true}

-- A task hash's named fields as a table (t.status, t.attempt, ...), in one HMGET. A field the
-- hash lacks (or a missing hash) reads false, as HMGET gives it.
local function read_task(tkey, ...)
  local names = {...}
  local values = rcall('HMGET', tkey, unpack(names))
  local t = {}
  for i, name in ipairs(names) do t[name] = values[i] end
  return t
end

-- Epoch milliseconds as UTC ISO-8601 with milliseconds, exactly like dtq_core.clock.iso
-- (days to civil date after Howard Hinnant's algorithm).
local function iso_ms(ms)
  local floor = math.floor
  local secs = floor(ms / 1000)
  local days = floor(secs / 86400)
  local sod = secs - days * 86400
  local z = days + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local day = doy - floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', year, month, day, floor(sod / 3600),
                       floor(sod / 60) % 60, sod % 60, ms - secs * 1000)
end

-- Redis's clock as {ms string, ISO}: for a script queued behind a blocking wait, whose caller
-- cannot know when it will run, and for an operator's "now" that must not depend on the API
-- host's clock (runTaskNow); everything else gets now from the caller's Clock.
local function server_now()
  local t = rcall('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return string.format('%.0f', ms), iso_ms(ms)
end

-- The keys of one queue partition, built from its prefix (KEYS[1] of every partition script:
-- "<prefix>:{<tag>}:"), so every key a script touches is in the partition's slot. The suffixes
-- are dtq_core.keys.Keys's (tests/core/test_keyspace.py keeps the two equal). Channels are not
-- keys: their names are built from the global prefix in front of the tag.
-- A name is built when a script first reads it: a call reads a handful of the ~40, and building
-- them all cost every call about 4 µs of Redis CPU (issue 20).
local PARTITION_SUFFIX = {
  owner = 'queue', task_prefix = 'task:', result_prefix = 'result:', idem_prefix = 'idem:',
  unique_prefix = 'unique:', stream_prefix = 'stream:', schedule = 'schedule',
  schedule_claims = 'schedule:claims', lock = 'lock', dlq = 'dlq', running = 'running', recent = 'recent',
  ready = 'ready', wake_list = 'wake', paused = 'paused', stats_tasks = 'stats:tasks',
  stats_duration = 'stats:duration', stats_counters = 'stats:counters', throughput_prefix = 'stats:done:',
  event_seq = 'events:seq',
  periodic_prefix = 'periodic:', periodic_index = 'periodic', periodic_tick_prefix = 'periodic-tick:',
  retain_ok = 'retain:ok', retain_failed = 'retain:failed', limits = 'limits', limits_rate = 'limits:rate',
  limits_held = 'limits:held', limits_groups = 'limits:groups', limits_waiting = 'limits:waiting',
  limits_wait_prefix = 'limits:wait:', limits_grate_prefix = 'limits:grate:', limits_gpause = 'limits:gpause',
  wf_outbox = 'wf_outbox', wf_outbox_due = 'wf_outbox:due', wf_prefix = 'wf:', hist = 'hist:',
  hist_types = 'hist:types', samples_prefix = 'samples:'}
local PARTITION_CHANNEL = {events_channel = ':events', wake_channel = ':wake'}

-- A partition's names: its prefix, tag and global prefix, and each key name once built. In a
-- function library (dtq_core/scripts/library.py) this table outlives the call, so a hot-path call
-- finds its names built by the calls before it: parsing the prefix and concatenating its names
-- cost an empty fetch about a third of its Redis CPU (issue 20). K, the call's own table, reads
-- through to it and holds the call's marks (limits_rung), which must not outlive the call.
local PARTITION_NAMES_META = {__index = function(names, name)
  local suffix = PARTITION_SUFFIX[name]
  local built
  if suffix then
    built = names.prefix .. suffix
  else
    suffix = PARTITION_CHANNEL[name]
    if not suffix then return nil end
    built = names.global_prefix .. suffix
  end
  names[name] = built
  return built
end}
-- prefix -> the metatable of its calls' K tables. Bounded: a Redis serving more partitions than
-- this starts over (each entry is a few hundred bytes of Lua memory).
local PARTITION_CACHE, partition_cache_size, PARTITION_CACHE_MAX = {}, 0, 512
-- Whether this code runs as a function library (call_begin says so): only then do the caches
-- outlive the call. An EVALSHA script would fill them to throw them away, which costs more than
-- it saves, so it builds what it reads on the call's own tables.
local in_library = false

local function partition_keys(p)
  local meta = PARTITION_CACHE[p]
  if not meta then
    local global, tag = string.match(p, '^(.*):{([^}]*)}:$')
    if not tag then return error('not a partition key prefix: ' .. tostring(p), 0) end
    local names = setmetatable({prefix = p, tag = tag, global_prefix = global}, PARTITION_NAMES_META)
    if not in_library then return names end
    if partition_cache_size >= PARTITION_CACHE_MAX then PARTITION_CACHE, partition_cache_size = {}, 0 end
    meta = {__index = names}
    PARTITION_CACHE[p], partition_cache_size = meta, partition_cache_size + 1
  end
  return setmetatable({}, meta)
end

-- A stream of the partition: one of its queue's priorities (dtq_core.keys.Keys.stream).
local function stream_key(K, queue, priority)
  return K.stream_prefix .. queue .. ':' .. priority
end

-- Whether emit publishes. The hot-path scripts (enqueueTask, fetchTasks, completeTasks) set it
-- from their events argument: their callers pass 0 when nobody listens (DTQ_EVENTS,
-- dtq_core/events.py), which saves the two commands below per event. Every other script emits.
local events_on = true

-- Publish one event on the events channel; the partition's tag and counter make event_id unique
-- across processes and partitions.
-- A script that emits per task of a batch sets events_pending to {} and calls emit_flush once at
-- its end: the batch's sequence numbers then cost one INCRBY rather than an INCR per event (the
-- script is atomic, so nobody sees the publishes later than they would have).
local events_pending = nil

local function publish_event(K, seq, etype, task_id, queue, status, attempt, now_ms, now_iso)
  rcall('PUBLISH', K.events_channel, cjson.encode({
    event_id = now_ms .. '-' .. K.tag .. '-' .. seq, type = etype, task_id = task_id or cjson.null,
    queue = queue or cjson.null, status = status or cjson.null,
    attempt = tonumber(attempt) or 0, ts = now_iso}))
end

local function emit(K, etype, task_id, queue, status, attempt, now_ms, now_iso)
  if not events_on then return end
  if events_pending then
    events_pending[#events_pending + 1] = {etype, task_id, queue, status, attempt, now_ms, now_iso}
    return
  end
  publish_event(K, rcall('INCR', K.event_seq), etype, task_id, queue, status, attempt, now_ms, now_iso)
end

local function emit_flush(K)
  local pending = events_pending
  if not pending or #pending == 0 then return end
  events_pending = {}
  local base = rcall('INCRBY', K.event_seq, #pending) - #pending
  for i, e in ipairs(pending) do
    publish_event(K, base + i, e[1], e[2], e[3], e[4], e[5], e[6], e[7])
  end
end

-- The task's JSON error list. A field that is not one (corrupted by hand or by a bug) raises an
-- error naming it, which the batch scripts turn into a quarantine of that one record.
local function decode_errors(raw)
  if not raw or raw == '' or raw == '[]' then return {} end
  local ok, list = pcall(cjson.decode, raw)
  if not ok or type(list) ~= 'table' or (next(list) ~= nil and list[1] == nil) then
    error('the task field errors is not a JSON list' .. (ok and '' or ' (' .. tostring(list) .. ')'), 0)
  end
  return list
end

-- Append one error record to the task's JSON error list, keeping the newest 20.
local function push_error(raw, attempt, err_class, message, tb, now_iso)
  local list = decode_errors(raw)
  list[#list + 1] = {attempt = tonumber(attempt), error = err_class, message = message,
                     traceback = tb, at = now_iso}
  while #list > 20 do table.remove(list, 1) end
  return cjson.encode(list)
end

-- Schedule bookkeeping: the counts hash keeps "retry scheduled" per queue without a scan.
local function schedule_add(schedule_key, due, task_id, queue)
  if rcall('ZADD', schedule_key, due, task_id) == 1 then
    rcall('HINCRBY', schedule_key .. ':counts', queue, 1)
  end
end

local function schedule_rem(schedule_key, task_id, queue)
  if rcall('ZREM', schedule_key, task_id) == 1 then
    rcall('HINCRBY', schedule_key .. ':counts', queue, -1)
  end
end

-- The partition just got an entry: mark it ready (workers read only ready partitions) and, when
-- it was not, publish its tag on the wake channel, where idle workers wait. A busy partition
-- stays ready, so a burst publishes once; a fetch that reads the partition to its end clears
-- the flag in the same script, and the next entry publishes again. A lost message (a worker
-- reconnecting) costs that worker a full sweep, never a task: see dtq_core/worker/wake.py.
-- The same moment pushes a token on the partition's wake list (kept to one): an idle worker
-- that serves this partition alone waits there with BLPOP and its fetch queued behind it, so it
-- claims the entry in the round trip that wakes it (dtq_core/worker/fetch.py, _wait_on_list).
local function ring(K)
  -- Once a call: the first ring leaves the flag set, so a second SET NX could only fail (a batch
  -- of 100 submits rang 100 times). A script deletes the flag only with clear_ready, which clears
  -- the mark too.
  if rawget(K, 'ready_rung') then return end
  K.ready_rung = true
  -- pcall: a ready key overwritten by hand must not fail the submit (workers then sweep).
  local set = redis.pcall('SET', K.ready, '1', 'NX')
  if set and type(set) == 'table' and set.ok then
    rcall('PUBLISH', K.wake_channel, K.tag)
    -- pcall: nor a wake list overwritten by hand (the worker then falls back to the channel).
    -- Trimmed only when a token was there already (no idle worker took it): one command usually.
    local tokens = redis.pcall('RPUSH', K.wake_list, '1')
    if type(tokens) == 'number' and tokens > 1 then redis.pcall('LTRIM', K.wake_list, -1, -1) end
  end
end

-- Delete the partition's ready flag; the call's next ring sets it again.
local function clear_ready(K)
  rcall('DEL', K.ready)
  K.ready_rung = nil
end

-- The field of the per-outcome task counts (dtq_tasks_total): "queue|type|status".
local function outcome_field(queue, ttype, status)
  return (queue or '') .. '|' .. (ttype or '') .. '|' .. string.lower(status)
end

local function field(fields, name)
  for f = 1, #fields, 2 do
    if fields[f] == name then return fields[f + 1] end
  end
  return nil
end

-- Trim the DLQ to its cap, oldest first, keeping the per-queue counts exact. A trimmed entry's
-- task stays DEAD_LETTERED but no longer points at the entry (nothing is left to retry or discard).
local function trim_dlq(K, maxlen, now_ms)
  local dlq_key, task_prefix = K.dlq, K.task_prefix
  local excess = rcall('XLEN', dlq_key) - tonumber(maxlen)
  if excess <= 0 then return end
  for _, entry in ipairs(rcall('XRANGE', dlq_key, '-', '+', 'COUNT', excess)) do
    local queue, task_id = field(entry[2], 'queue'), field(entry[2], 'task_id')
    if queue then rcall('HINCRBY', dlq_key .. ':counts', queue, -1) end
    rcall('XDEL', dlq_key, entry[1])
    if task_id then
      local tkey = task_prefix .. task_id
      if rcall('HGET', tkey, 'dlq_entry_id') == entry[1] then
        rcall('HSET', tkey, 'dlq_entry_id', '', 'dlq_trimmed_at', now_ms)
      end
    end
  end
  rcall('HINCRBY', K.stats_counters, 'dlq_trimmed', excess)
end

-- Move a task to the DLQ (or FAILED when the DLQ is off); returns the new status.
local function dead_letter(K, task_id, queue, ttype, attempt, err_class, message, now_ms, dlq_enabled, dlq_maxlen)
  local tkey, dlq_key = K.task_prefix .. task_id, K.dlq
  if dlq_enabled == '1' then
    local eid = rcall('XADD', dlq_key, '*', 'task_id', task_id,
                      'queue', queue, 'type', ttype, 'attempt', attempt,
                      'error_class', err_class, 'error', message, 'failed_at', now_ms)
    rcall('HINCRBY', dlq_key .. ':counts', queue, 1)
    trim_dlq(K, dlq_maxlen, now_ms)
    rcall('HSET', tkey, 'status', 'DEAD_LETTERED', 'dlq_entry_id', eid)
    return 'DEAD_LETTERED'
  end
  rcall('HSET', tkey, 'status', 'FAILED')
  return 'FAILED'
end

-- #include retain
-- #include history

-- The text of an error caught by pcall: redis.call raises tables ({err = ...}), Lua strings
-- carry the script's position ("user_script:12: ", "user_function:12: "), which says nothing to an operator.
local function error_text(e)
  if type(e) == 'table' then e = e.err end
  return (string.gsub(tostring(e), '^user_%a+:%d+: ', ''))
end

-- Quarantine a record a batch script could not process (a corrupt field: a cjson.decode or an
-- arithmetic on it failed) instead of failing the whole batch, which its caller would retry
-- forever while every other record of the batch waited. The task goes to the DLQ (FAILED when
-- it is off) with error class dtq.CorruptRecord and the reason; an errors field that does not
-- decode is kept aside as errors_corrupt and starts again empty, an attempt that is not a
-- number as attempt_corrupt (attempt 0), so the record reads (and a retry from the DLQ runs)
-- normally. Counted as corrupt_records (dtq_corrupt_records_total).
-- q: K (partition_keys), now_ms, now_iso, retention_ms, dlq_enabled, dlq_maxlen, R (retention_policy:
-- the record is indexed and trimmed like any failure; absent, it is only given retention_ms). Returns the new status, or nil when the task
-- could not be written either (no hash, or a key of another type): the caller still settles
-- its entry, so nothing loops.
local function quarantine(q, task_id, reason)
  local K = q.K
  rcall('HINCRBY', K.stats_counters, 'corrupt_records', 1)
  local tkey = K.task_prefix .. tostring(task_id)
  local ok, status = pcall(function()
    local t = read_task(tkey, 'status', 'queue', 'type', 'attempt', 'errors')
    if not t.status then return nil end
    local queue, ttype, attempt = t.queue or '', t.type or '', tonumber(t.attempt)
    if not attempt then  -- the DLQ entry, events and the API need a number
      rcall('HSET', tkey, 'attempt_corrupt', t.attempt or '', 'attempt', 0)
      attempt = 0
    end
    local raw = t.errors or ''
    if not pcall(decode_errors, raw) then
      rcall('HSET', tkey, 'errors_corrupt', raw)
      raw = '[]'
    end
    local st = dead_letter(K, task_id, queue, ttype, attempt, 'dtq.CorruptRecord', reason, q.now_ms,
                           q.dlq_enabled, q.dlq_maxlen)
    rcall('HSET', tkey, 'errors', push_error(raw, attempt, 'dtq.CorruptRecord', reason, '', q.now_iso),
          'last_error', 'dtq.CorruptRecord: ' .. reason, 'finished_at', q.now_ms, 'updated_at', q.now_ms)
    if q.R then retain_finish(q.R, K, task_id, st, q.now_ms) else rcall('PEXPIRE', tkey, q.retention_ms) end
    rcall('ZREM', K.running, task_id)
    rcall('HINCRBY', K.stats_tasks, outcome_field(queue, ttype, st), 1)
    history_add(K, q.now_ms, ttype, st)
    emit(K, st == 'FAILED' and 'task.failed' or 'task.dead_lettered', task_id, queue, st,
         attempt, q.now_ms, q.now_iso)
    return st
  end)
  if ok then return status end
  return nil
end

-- A hot-path script runs as a Redis function (dtq_core/scripts/library.py): these includes are
-- then loaded once, and their variables outlive a call. Each call starts by setting them back.
local function call_begin()
  in_library = true
  events_on, events_pending = true, nil
  history_fields, history_names, history_batched, history_raw = {}, {}, false, false
end
