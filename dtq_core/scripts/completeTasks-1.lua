--[[
  Record how a batch of attempts ended and acknowledge their entries, fenced: a record is
  written only when the task is still RUNNING at the same attempt under the same entry, so a
  worker that lost its entry to a peer can never overwrite the newer attempt or ACK its entry.
  A record applied here is marked (field completed = "<attempt>@<entry id>"), so the same record
  sent again (the worker lost the reply to a batch that landed) is told apart from a fenced one.
  Each record succeeds or fails alone: one that cannot be processed (a corrupt task field) is
  quarantined (see quarantine in common.lua) and its entry acknowledged; the rest complete.
  Every record is of a task of this partition: the worker groups its completions by the tag of
  their task ids and sends one call per partition, pipelined.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1..7] group, now (ms), now (ISO), retention (includes/retain.lua: retention_policy),
               result retention (ms), dlq enabled (1/0), dlq maxlen
    ARGV[8] JSON list of records, each a list of 13 strings: task id, attempt, entry id, stream (after
             the partition's stream key prefix: queue:priority),
             outcome (ok|retry|fail|cancel|limited), result JSON, truncated (1/0), error class,
             error message, traceback tail, retry due (ms, 0 = out of attempts; for limited: when
             the task may start again), duration (s), histogram bucket label; a limited record
             has a 14th: the scope of its pause (queue|group, includes/limits.lua).
             (One argument for the batch: redis-py's asyncio client
             packs every argument in Python, which cost more than cjson decoding them here.)
             A result of JSON null is not stored: the record says so (result_null = 1).
    ARGV[9] events (1/0: publish task events, see events_on in common.lua; absent = 1)
    ARGV[10] samples (1: return the batch's samples instead of writing them, for the worker to
             write once a second with flushStats; absent or 0: write them here)
  Output:
    one status per record: the new status (PENDING for a limited one); 'fenced' (a newer
    attempt owns the task); 'resent'
    (this record was applied already); or {'quarantined', new status ('' when the task could not
    be written), reason};
    with ARGV[10] = 1, one more element after them: the samples, as JSON
    {"h": {history field: n}, "f": {queue: n}, "b": {bucket label: n}, "s": run-time sum} (history
    fields under the type's own name, includes/samples.lua; the minute is that of ARGV[2])
]]
-- #include common
-- #include limits
-- #include samples
local K = partition_keys(KEYS[1])
-- Flow control (includes/limits.lua): one read of the partition's limits per batch.
local lim_conc, lim_gconc = unpack(rcall('HMGET', K.limits, 'conc', 'gconc'))
local group, now_ms, now_iso = ARGV[1], ARGV[2], ARGV[3]
-- Finished records are compacted, indexed and counted per outcome (includes/retain.lua); the
-- count trim runs once, after the batch.
local R = retention_policy(ARGV[4])
R.defer = true
local retention_ms, result_retention_ms = R.task_ms, ARGV[5]
local task_prefix, result_prefix, dlq_enabled, dlq_maxlen = K.task_prefix, K.result_prefix, ARGV[6], ARGV[7]
events_on = ARGV[9] ~= '0'
events_pending = {}
history_batched = true
-- The statistics' samples (history, finished per minute, run times) returned, not written: 0.9
-- of a drain's 9.4 commands per task and 5-9 % of its Redis CPU (docs/performance.md, issue 20
-- goal 4). The outcome counts stay here, exact.
local samples_out = ARGV[10] == '1'
history_raw = samples_out

-- The batch's entries, acknowledged and deleted with one XACK and one XDEL per stream, and its
-- tasks, taken out of the running index with one ZREM, after the records: a Redis command per
-- batch rather than three per task (nothing else runs between, the script being atomic).
local settled, stopped = {}, {}
local function settle(stream, entry_id)
  local ids = settled[stream]
  if not ids then
    ids = {}
    settled[stream] = ids
  end
  ids[#ids + 1] = entry_id
end

-- Stats are summed over the batch and written once at the end: one HINCRBY per distinct field
-- instead of five commands per task (the hot path's Redis CPU).
local task_counts, finished, buckets, duration_sum = {}, {}, {}, 0
local function add(t, field, n) t[field] = (t[field] or 0) + n end

local function complete_one(r)
  local task_id, attempt, entry_id, stream, outcome = r[1], r[2], r[3], K.stream_prefix .. r[4], r[5]
  local tkey = task_prefix .. task_id
  -- The fields a compact record keeps are read here too: one HMGET for both. A table
  -- constructor, not read_task's fill loop: it is sized once instead of growing four times.
  local v = rcall('HMGET', tkey, 'status', 'attempt', 'entry_id', 'queue', 'type', 'errors', 'cancel_requested',
                  'completed', 'priority', 'created_at', 'started_at', 'worker_id', 'result_truncated',
                  'last_error', 'handler', 'periodic_name', 'scheduled_for', 'workflow_id', 'progress_at', 'headers')
  local t = {status = v[1], attempt = v[2], entry_id = v[3], queue = v[4], type = v[5], errors = v[6],
             cancel_requested = v[7], completed = v[8], priority = v[9], created_at = v[10], started_at = v[11],
             worker_id = v[12], result_truncated = v[13], last_error = v[14], handler = v[15],
             periodic_name = v[16], scheduled_for = v[17], workflow_id = v[18], progress_at = v[19],
             headers = v[20]}
  local mark = attempt .. '@' .. entry_id
  if t.status ~= 'RUNNING' or t.attempt ~= attempt or t.entry_id ~= entry_id then
    -- Applied by an earlier send whose reply was lost. A compact record (includes/retain.lua)
    -- has no mark: a SUCCEEDED one at this attempt is this record's (only a completion of the same
    -- attempt number under an older entry, after a DLQ retry, would be misread as resent).
    if t.completed == mark or (not t.completed and t.status == 'SUCCEEDED' and t.attempt == attempt) then
      return 'resent'
    end
    rcall('HINCRBY', K.stats_counters, 'fenced', 1)
    return 'fenced'
  end
  local queue, ttype = t.queue, t.type
  local errors
  if outcome ~= 'ok' and outcome ~= 'cancel' then
    -- Before any write: a corrupt error list fails this record with nothing half-written.
    errors = push_error(t.errors, attempt, r[8], r[9], r[10], now_iso)
  end
  local status, etype
  local ttl = retention_ms
  if outcome == 'ok' then
    -- Most handlers return nothing: a JSON null costs a flag in the record, not a key and a SET.
    local result = r[6]
    local writes = {'status', 'SUCCEEDED', 'result_truncated', r[7], 'finished_at', now_ms, 'updated_at', now_ms,
                    'completed', mark}
    if result == 'null' then
      writes[#writes + 1], writes[#writes + 2] = 'result_null', '1'
    elseif result ~= '' then
      rcall('SET', result_prefix .. task_id, result, 'PX', result_retention_ms)
    end
    retain_finish(R, K, task_id, 'SUCCEEDED', now_ms, t, writes)
    status, etype = 'SUCCEEDED', 'task.succeeded'
  elseif outcome == 'limited' and t.cancel_requested ~= '1' then
    -- RateLimited from the handler: not an attempt (the record goes back to the attempt before,
    -- so the next entry runs this attempt number again), never the DLQ; the task waits in the
    -- schedule and its queue or group starts nothing until then.
    local due = tonumber(r[11])
    rcall('HSET', tkey, 'status', 'PENDING', 'attempt', tonumber(attempt) - 1, 'due_at', due, 'entry_id', '',
          'last_error', r[8] .. ': ' .. r[9], 'updated_at', now_ms, 'completed', mark)
    schedule_add(K.schedule, due, task_id, queue)
    rcall('PEXPIRE', tkey, ttl + math.max(0, due - tonumber(now_ms)))
    limits_pause(K, tkey, r[14], due)
    status, etype = 'PENDING', 'task.retrying'
  elseif outcome == 'cancel' or outcome == 'limited' then
    retain_finish(R, K, task_id, 'CANCELLED', now_ms, t, {'status', 'CANCELLED', 'finished_at', now_ms,
                  'updated_at', now_ms, 'completed', mark})
    status, etype = 'CANCELLED', 'task.cancelled'
  else
    local err_class, message = r[8], r[9]
    rcall('HSET', tkey, 'errors', errors, 'last_error', err_class .. ': ' .. message, 'updated_at', now_ms,
          'completed', mark)
    local due = tonumber(r[11])
    if t.cancel_requested == '1' then
      -- A cancel accepted while this attempt ran (and not yet acted on by the worker's watcher):
      -- the failure is recorded above, but nothing runs again.
      t.last_error, t.completed, t.errors = err_class .. ': ' .. message, mark, errors
      retain_finish(R, K, task_id, 'CANCELLED', now_ms, t, {'status', 'CANCELLED', 'finished_at', now_ms})
      status, etype = 'CANCELLED', 'task.cancelled'
    elseif outcome == 'retry' and due > 0 then
      rcall('HSET', tkey, 'status', 'RETRYING', 'due_at', due)
      schedule_add(K.schedule, due, task_id, queue)
      status, etype = 'RETRYING', 'task.retrying'
      rcall('PEXPIRE', tkey, ttl + math.max(0, due - tonumber(now_ms)))  -- the record must outlive its wait
    else
      status = dead_letter(K, task_id, queue, ttype, attempt, err_class, message, now_ms, dlq_enabled,
                           dlq_maxlen)
      retain_finish(R, K, task_id, status, now_ms, nil, {'finished_at', now_ms})
      etype = status == 'FAILED' and 'task.failed' or 'task.dead_lettered'
    end
  end
  stopped[#stopped + 1] = task_id
  settle(stream, entry_id)
  if status ~= 'PENDING' then
    add(task_counts, outcome_field(queue, ttype, status), 1)
    -- History: the outcome, the attempt's wait (its entry's add to its claim) and run time.
    local started, entered = tonumber(t.started_at), entry_ms(entry_id)
    history_add(K, now_ms, ttype, status, started and entered and math.max(0, started - entered) or nil,
                outcome ~= 'cancel' and tonumber(r[12]) * 1000 or nil)
  end
  if status ~= 'RETRYING' and status ~= 'PENDING' then add(finished, queue, 1) end
  if outcome ~= 'cancel' then
    add(buckets, r[13], 1)
    duration_sum = duration_sum + tonumber(r[12])
  end
  emit(K, etype, task_id, queue, status, attempt, now_ms, now_iso)
  return status
end

local q = nil  -- the quarantine's context, made when a record fails
local statuses = {}
for _, record in ipairs(cjson.decode(ARGV[8])) do
  local ok, status = pcall(complete_one, record)
  if not ok then
    local reason = 'the completion of attempt ' .. tostring(record[2]) .. ' could not be recorded: '
                   .. error_text(status)
    q = q or {K = K, now_ms = now_ms, now_iso = now_iso, retention_ms = retention_ms, dlq_enabled = dlq_enabled,
              dlq_maxlen = dlq_maxlen, R = R}
    status = {'quarantined', quarantine(q, record[1], reason) or '', reason}
    if lim_gconc then limits_release(K, tostring(record[1])) end
    local stream = K.stream_prefix .. tostring(record[4])
    redis.pcall('XACK', stream, group, record[3])
    redis.pcall('XDEL', stream, record[3])
  end
  statuses[#statuses + 1] = status
end
if #stopped > 0 then rcall('ZREM', K.running, unpack(stopped)) end
if lim_gconc then
  for _, id in ipairs(stopped) do limits_release(K, id) end
end
if lim_conc and #stopped > 0 then ring(K) end  -- freed queue slots: wake a worker held back
for stream, ids in pairs(settled) do
  rcall('XACK', stream, group, unpack(ids))
  rcall('XDEL', stream, unpack(ids))
end
retain_trim(R, K, now_ms)
emit_flush(K)
for field, n in pairs(task_counts) do rcall('HINCRBY', K.stats_tasks, field, n) end
if samples_out then
  statuses[#statuses + 1] = cjson.encode({h = history_fields, f = finished, b = buckets, s = duration_sum})
  history_fields = {}
  return statuses
end
history_flush(K, now_ms)
samples_write_finished(K, math.floor(tonumber(now_ms) / 60000), finished)
samples_write_duration(K, buckets, duration_sum)
return statuses
