--[[
  Record how a batch of attempts ended and acknowledge their entries, fenced: a record is
  written only when the task is still RUNNING at the same attempt under the same entry, so a
  worker that lost its entry to a peer can never overwrite the newer attempt or ACK its entry.
  A record applied here is marked (field completed = "<attempt>@<entry id>"), so the same record
  sent again (the worker lost the reply to a batch that landed) is told apart from a fenced one.
  Each record succeeds or fails alone: one that cannot be processed (a corrupt task field) is
  quarantined (see quarantine in common.lua) and its entry acknowledged; the rest complete.
  Input:
    KEYS[1] events channel  KEYS[2] event seq  KEYS[3] schedule  KEYS[4] DLQ stream
    KEYS[5] stats tasks     KEYS[6] stats duration histogram     KEYS[7] stats counters
    KEYS[8] finished-per-queue hash of the current minute   KEYS[9] running index
    KEYS[10] task key prefix (prefix .. task id)   KEYS[11] result key prefix (prefix .. task id)
    KEYS[12] stream key prefix (prefix .. queue .. ':' .. priority)
    ARGV[1..7] group, now (ms), now (ISO), retention (ms), result retention (ms),
               dlq enabled (1/0), dlq maxlen
    ARGV[8] JSON list of records, each a list of 13 strings: task id, attempt, entry id, stream (after
             the stream key prefix: queue:priority),
             outcome (ok|retry|fail|cancel), result JSON, truncated (1/0), error class, error
             message, traceback tail, retry due (ms, 0 = out of attempts), duration (s),
             histogram bucket label. (One argument for the batch: redis-py's asyncio client
             packs every argument in Python, which cost more than cjson decoding them here.)
  Output:
    one status per record: the new status; 'fenced' (a newer attempt owns the task); 'resent'
    (this record was applied already); or {'quarantined', new status ('' when the task could not
    be written), reason}
]]
-- #include common
local group, now_ms, now_iso = ARGV[1], ARGV[2], ARGV[3]
local retention_ms, result_retention_ms = ARGV[4], ARGV[5]
local task_prefix, result_prefix, dlq_enabled, dlq_maxlen = KEYS[10], KEYS[11], ARGV[6], ARGV[7]

-- Stats are summed over the batch and written once at the end: one HINCRBY per distinct field
-- instead of five commands per task (the hot path's Redis CPU).
local task_counts, finished, buckets, duration_sum = {}, {}, {}, 0
local function add(t, field, n) t[field] = (t[field] or 0) + n end

local function complete_one(r)
  local task_id, attempt, entry_id, stream, outcome = r[1], r[2], r[3], KEYS[12] .. r[4], r[5]
  local tkey = task_prefix .. task_id
  local t = read_task(tkey, 'status', 'attempt', 'entry_id', 'queue', 'type', 'errors', 'cancel_requested',
                     'completed')
  local mark = attempt .. '@' .. entry_id
  if t.status ~= 'RUNNING' or t.attempt ~= attempt or t.entry_id ~= entry_id then
    if t.completed == mark then return 'resent' end  -- applied by an earlier send whose reply was lost
    rcall('HINCRBY', KEYS[7], 'fenced', 1)
    return 'fenced'
  end
  local queue, ttype = t.queue, t.type
  local errors
  if outcome ~= 'ok' and outcome ~= 'cancel' then
    -- Before any write: a corrupt error list fails this record with nothing half-written.
    errors = push_error(t.errors, attempt, r[8], r[9], r[10], now_iso)
  end
  rcall('ZREM', KEYS[9], task_id)
  local status, etype
  local ttl = tonumber(retention_ms)
  if outcome == 'ok' then
    local result = r[6]
    if result ~= '' then rcall('SET', result_prefix .. task_id, result, 'PX', result_retention_ms) end
    rcall('HSET', tkey, 'status', 'SUCCEEDED', 'result_truncated', r[7], 'finished_at', now_ms,
          'updated_at', now_ms, 'completed', mark)
    status, etype = 'SUCCEEDED', 'task.succeeded'
  elseif outcome == 'cancel' then
    rcall('HSET', tkey, 'status', 'CANCELLED', 'finished_at', now_ms, 'updated_at', now_ms, 'completed', mark)
    status, etype = 'CANCELLED', 'task.cancelled'
  else
    local err_class, message = r[8], r[9]
    rcall('HSET', tkey, 'errors', errors, 'last_error', err_class .. ': ' .. message, 'updated_at', now_ms,
          'completed', mark)
    local due = tonumber(r[11])
    if t.cancel_requested == '1' then
      -- A cancel accepted while this attempt ran (and not yet acted on by the worker's watcher):
      -- the failure is recorded above, but nothing runs again.
      rcall('HSET', tkey, 'status', 'CANCELLED', 'finished_at', now_ms)
      status, etype = 'CANCELLED', 'task.cancelled'
    elseif outcome == 'retry' and due > 0 then
      rcall('HSET', tkey, 'status', 'RETRYING', 'due_at', due)
      schedule_add(KEYS[3], due, task_id, queue)
      status, etype = 'RETRYING', 'task.retrying'
      ttl = ttl + math.max(0, due - tonumber(now_ms))  -- the record must outlive its wait
    else
      status = dead_letter(task_prefix, task_id, queue, ttype, attempt, err_class, message, now_ms,
                           KEYS[4], dlq_enabled, dlq_maxlen, KEYS[7])
      rcall('HSET', tkey, 'finished_at', now_ms)
      etype = status == 'FAILED' and 'task.failed' or 'task.dead_lettered'
    end
  end
  rcall('PEXPIRE', tkey, ttl)
  rcall('XACK', stream, group, entry_id)
  rcall('XDEL', stream, entry_id)
  add(task_counts, outcome_field(queue, ttype, status), 1)
  if status ~= 'RETRYING' then add(finished, queue, 1) end
  if outcome ~= 'cancel' then
    add(buckets, r[13], 1)
    duration_sum = duration_sum + tonumber(r[12])
  end
  emit(KEYS[1], KEYS[2], etype, task_id, queue, status, attempt, now_ms, now_iso)
  return status
end

local q = {task_prefix = task_prefix, now_ms = now_ms, now_iso = now_iso, retention_ms = retention_ms,
           dlq_key = KEYS[4], dlq_enabled = dlq_enabled, dlq_maxlen = dlq_maxlen, counters_key = KEYS[7],
           running_key = KEYS[9], outcomes_key = KEYS[5], events_key = KEYS[1], seq_key = KEYS[2]}
local statuses = {}
for _, record in ipairs(cjson.decode(ARGV[8])) do
  local ok, status = pcall(complete_one, record)
  if not ok then
    local reason = 'the completion of attempt ' .. tostring(record[2]) .. ' could not be recorded: '
                   .. error_text(status)
    status = {'quarantined', quarantine(q, record[1], reason) or '', reason}
    local stream = KEYS[12] .. tostring(record[4])
    redis.pcall('XACK', stream, group, record[3])
    redis.pcall('XDEL', stream, record[3])
  end
  statuses[#statuses + 1] = status
end
for field, n in pairs(task_counts) do rcall('HINCRBY', KEYS[5], field, n) end
if next(finished) then
  for field, n in pairs(finished) do rcall('HINCRBY', KEYS[8], field, n) end
  rcall('PEXPIRE', KEYS[8], 3600000)
end
if next(buckets) then
  for field, n in pairs(buckets) do rcall('HINCRBY', KEYS[6], field, n) end
  rcall('HINCRBYFLOAT', KEYS[6], 'sum', string.format('%.6f', duration_sum))
end
return statuses
