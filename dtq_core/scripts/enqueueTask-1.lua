--[[
  Create a task in one partition of its queue, atomically with its idempotency key and the depth
  gate: QUEUED in its priority stream, or PENDING in the partition's schedule when it is delayed
  (delayed tasks bypass the depth gate). The queue's registration and the bound on queues
  (DTQ_MAX_QUEUES) are registerQueue-1's; this script only checks that the partition still
  belongs to the layout the caller read (the queue may have been deleted since).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] task id  ARGV[2] priority (high/normal/low)  ARGV[3] now (ms)  ARGV[4] now (ISO)
    ARGV[5] retention (ms)  ARGV[6] idempotency ttl (ms)
    ARGV[7] most entries in this partition's streams (0 = off)  ARGV[8] due (ms, 0 = now)
    ARGV[9] owner the caller expects ("<queue>|<epoch>": the queue comes from it)
    ARGV[10] idempotency key ('' = none)  ARGV[11] recent cap (of this partition's index)
    ARGV[12] return the record (1/0)  ARGV[13] events (1/0: publish task.queued, see events_on
    in common.lua)  ARGV[14..] task hash field/value pairs
  Output:
    {OK, id, status, record} created; {EXISTING, existing id, its status, record, result}
    idempotency key seen; {QUEUE_FULL, depth of this partition}; {PARTITION_CLOSED} the owner
    key names another layout (codes: CODE in includes/common.lua). record is the task hash as
    flat field/value pairs (empty unless asked for), so a submit needs no second round trip to
    show the task. The recent index is trimmed to its cap by one submit in 16 (those whose task
    id ends in 0), so it may hold a few more than the cap.
]]
-- #include common
local K = partition_keys(KEYS[1])
local task_id, priority, now_ms, now_iso = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local want_record = ARGV[12] == '1'
events_on = ARGV[13] ~= '0'
-- Deleted (or deleted and created again) since the caller read the registry: nothing may land
-- in a partition no layout serves. The caller reads the registry again and retries.
local owner = rcall('GET', K.owner)
if owner ~= ARGV[9] then return {CODE.PARTITION_CLOSED} end
-- The partition's queue, as the partition itself records it.
local queue = string.match(owner, '^(.*)|[^|]*$')
local idem_key = nil
if ARGV[10] ~= '' then idem_key = K.idem_prefix .. ARGV[10] end
if idem_key then
  local existing = rcall('GET', idem_key)
  -- Even when the first task's record has already expired (DTQ_TASK_RETENTION_S shorter than
  -- DTQ_IDEM_TTL_S), the key still stands for it: a second task could repeat its side effects.
  if existing then
    local ekey = K.task_prefix .. existing
    local record, result = {}, ''
    if want_record then
      record = rcall('HGETALL', ekey)
      result = rcall('GET', K.result_prefix .. existing) or ''
    end
    return {CODE.EXISTING, existing, rcall('HGET', ekey, 'status') or '', record, result}
  end
end
local due = tonumber(ARGV[8])
local max_depth = tonumber(ARGV[7])
if due == 0 and max_depth > 0 then
  local depth = 0
  for _, p in ipairs({'high', 'normal', 'low'}) do depth = depth + rcall('XLEN', stream_key(K, queue, p)) end
  if depth >= max_depth then return {CODE.QUEUE_FULL, depth} end
end
-- One HSET for the whole record (the stream entry's id is part of it, so XADD comes first).
local tkey = K.task_prefix .. task_id
local fields = {'id', task_id, 'attempt', '0', 'created_at', now_ms, 'updated_at', now_ms, 'errors', '[]',
                'cancel_requested', '0', 'result_truncated', '0'}
for i = 14, #ARGV do fields[#fields + 1] = ARGV[i] end
local status, added
if due > 0 then
  status = 'PENDING'
  fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'status', status, 'due_at', ARGV[8]
  added = rcall('HSET', tkey, unpack(fields))
  schedule_add(K.schedule, due, task_id, queue)
else
  status = 'QUEUED'
  local eid = rcall('XADD', stream_key(K, queue, priority), '*', 'task_id', task_id, 'attempt', 1)
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = 'status', status, 'enqueued_at', now_ms
  fields[n + 5], fields[n + 6] = 'entry_id', eid
  added = rcall('HSET', tkey, unpack(fields))
  ring(K)
end
-- A delayed task's record, and its idempotency key, must outlive its wait (a delay may be longer
-- than either lifetime): a resubmit while it waits must still find it.
local wait = due > 0 and math.max(0, due - tonumber(now_ms)) or 0
rcall('PEXPIRE', tkey, tonumber(ARGV[5]) + wait)
if idem_key then rcall('SET', idem_key, task_id, 'PX', tonumber(ARGV[6]) + wait) end
rcall('ZADD', K.recent, now_ms, task_id)
-- Trimmed by one submit in 16, not checked by every one: task ids end in a random hex digit.
if string.sub(task_id, -1) == '0' then rcall('ZREMRANGEBYRANK', K.recent, 0, -tonumber(ARGV[11]) - 1) end
emit(K, 'task.queued', task_id, queue, status, 0, now_ms, now_iso)
-- A hash that was new (every field added) holds exactly what was written: no HGETALL for it.
local record = {}
if want_record then record = added * 2 == #fields and fields or rcall('HGETALL', tkey) end
return {CODE.OK, task_id, status, record}
