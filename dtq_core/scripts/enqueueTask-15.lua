--[[
  Create a task, atomically with its idempotency key, the depth gate and the queue-count bound:
  QUEUED in its priority stream, or PENDING in the schedule when it is delayed (delayed tasks
  bypass the depth gate, not the bound on queues).
  Input:
    KEYS[1] task hash   KEYS[2] idempotency key   KEYS[3..5] the queue's high/normal/low streams
    KEYS[6] schedule    KEYS[7] known queues set  KEYS[8] events channel  KEYS[9] event seq
    KEYS[10] recent tasks zset  KEYS[11] the queue's wake list  KEYS[12] ready queues set
    KEYS[13] shared wake list   KEYS[14] task key prefix (prefix .. task id)
    KEYS[15] result key prefix (prefix .. task id)
    ARGV[1] task id  ARGV[2] priority index (1..3)  ARGV[3] now (ms)  ARGV[4] now (ISO)
    ARGV[5] retention (ms)  ARGV[6] idempotency ttl (ms)  ARGV[7] max depth (0 = off)
    ARGV[8] due (ms, 0 = now)  ARGV[9] queue  ARGV[10] group  ARGV[11] use idempotency key (1/0)
    ARGV[12] recent cap  ARGV[13] return the record (1/0)  ARGV[14] most queues (0 = no bound)
    ARGV[15..] task hash field/value pairs
  Output:
    {OK, id, status, record} created; {EXISTING, existing id, its status, record, result}
    idempotency key seen; {QUEUE_FULL, depth} queue full; {QUEUE_LIMIT_REACHED, queues} a new
    queue past the bound (codes: CODE in includes/common.lua). record is the task hash as flat field/value pairs (empty unless
    asked for), so a submit needs no second round trip to show the task.
]]
-- #include common
local task_id, now_ms, now_iso, queue = ARGV[1], ARGV[3], ARGV[4], ARGV[9]
local want_record = ARGV[13] == '1'
if ARGV[11] == '1' then
  local existing = rcall('GET', KEYS[2])
  -- Even when the first task's record has already expired (DTQ_TASK_RETENTION_S shorter than
  -- DTQ_IDEM_TTL_S), the key still stands for it: a second task could repeat its side effects.
  if existing then
    local ekey = KEYS[14] .. existing
    local record, result = {}, ''
    if want_record then
      record = rcall('HGETALL', ekey)
      result = rcall('GET', KEYS[15] .. existing) or ''
    end
    return {CODE.EXISTING, existing, rcall('HGET', ekey, 'status') or '', record, result}
  end
end
local due = tonumber(ARGV[8])
local max_depth = tonumber(ARGV[7])
if due == 0 and max_depth > 0 then
  local depth = rcall('XLEN', KEYS[3]) + rcall('XLEN', KEYS[4]) + rcall('XLEN', KEYS[5])
  if depth >= max_depth then return {CODE.QUEUE_FULL, depth} end
end
if rcall('SISMEMBER', KEYS[7], queue) == 0 then
  -- Checked and registered in one script, so concurrent submits to new queues cannot overshoot.
  local max_queues = tonumber(ARGV[14])
  if max_queues > 0 then
    local count = rcall('SCARD', KEYS[7])
    if count >= max_queues then return {CODE.QUEUE_LIMIT_REACHED, count} end
  end
  rcall('SADD', KEYS[7], queue)
  for k = 3, 5 do
    pcall(rcall, 'XGROUP', 'CREATE', KEYS[k], ARGV[10], '0', 'MKSTREAM')
  end
end
-- One HSET for the whole record (the stream entry's id is part of it, so XADD comes first).
local fields = {'id', task_id, 'attempt', 0, 'created_at', now_ms, 'updated_at', now_ms, 'errors', '[]',
                'cancel_requested', '0', 'result_truncated', '0'}
for i = 15, #ARGV do fields[#fields + 1] = ARGV[i] end
local status
if due > 0 then
  status = 'PENDING'
  fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'status', status, 'due_at', due
  rcall('HSET', KEYS[1], unpack(fields))
  schedule_add(KEYS[6], due, task_id, queue)
else
  status = 'QUEUED'
  local eid = rcall('XADD', KEYS[2 + tonumber(ARGV[2])], '*', 'task_id', task_id, 'attempt', 1)
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = 'status', status, 'enqueued_at', now_ms
  fields[n + 5], fields[n + 6] = 'entry_id', eid
  rcall('HSET', KEYS[1], unpack(fields))
  ring(KEYS[11], KEYS[12], KEYS[13], queue)
end
-- A delayed task's record, and its idempotency key, must outlive its wait (a delay may be longer
-- than either lifetime): a resubmit while it waits must still find it.
local wait = due > 0 and math.max(0, due - tonumber(now_ms)) or 0
rcall('PEXPIRE', KEYS[1], tonumber(ARGV[5]) + wait)
if ARGV[11] == '1' then rcall('SET', KEYS[2], task_id, 'PX', tonumber(ARGV[6]) + wait) end
rcall('ZADD', KEYS[10], now_ms, task_id)
local recent_cap = tonumber(ARGV[12])
if rcall('ZCARD', KEYS[10]) > recent_cap then rcall('ZREMRANGEBYRANK', KEYS[10], 0, -recent_cap - 1) end
emit(KEYS[8], KEYS[9], 'task.queued', task_id, queue, status, 0, now_ms, now_iso)
return {CODE.OK, task_id, status, want_record and rcall('HGETALL', KEYS[1]) or {}}
