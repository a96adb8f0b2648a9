--[[
  Put claimed schedule entries into their streams (XADD before the claim is removed), moving
  PENDING/RETRYING tasks to QUEUED with the next attempt number. A task that moved on meanwhile
  (cancelled, or already queued by a duplicate claim) is not queued again. Fenced on the lock.
  A task whose record cannot be processed (a corrupt field) is quarantined (see quarantine in
  common.lua), alone: the rest of the batch is queued, and its claim is removed all the same.
  Input:
    KEYS[1] schedule claims  KEYS[2] scheduler lock  KEYS[3] events channel  KEYS[4] event seq
    KEYS[5] schedule  KEYS[6] per-outcome task counts (stats)  KEYS[7] DLQ stream
    KEYS[8] stats counters  KEYS[9] running index  KEYS[10] ready queues set
    KEYS[11] shared wake list  KEYS[12] task key prefix (prefix .. task id)
    KEYS[13] stream key prefix (prefix .. queue .. ':' .. priority)
    KEYS[14] wake key prefix (prefix .. queue)
    ARGV[1] worker id  ARGV[2] now (ms)  ARGV[3] now (ISO)  ARGV[4] retention (ms)
    ARGV[5] dlq enabled (1/0)  ARGV[6] dlq maxlen  ARGV[7..] task ids
  Output:
    {number of tasks queued, {task id, reason, ...} of those quarantined}, or CODE.LEASE_LOST when this worker
    does not hold the lock
]]
-- #include common
if rcall('GET', KEYS[2]) ~= ARGV[1] then return CODE.LEASE_LOST end
local now_ms, now_iso = ARGV[2], ARGV[3]
local q = {task_prefix = KEYS[12], now_ms = now_ms, now_iso = now_iso, retention_ms = ARGV[4], dlq_key = KEYS[7],
           dlq_enabled = ARGV[5], dlq_maxlen = ARGV[6], counters_key = KEYS[8], running_key = KEYS[9],
           outcomes_key = KEYS[6], events_key = KEYS[3], seq_key = KEYS[4]}
local queued, quarantined = 0, {}
local function enqueue_one(id)
  local tkey = KEYS[12] .. id
  local t = read_task(tkey, 'status', 'attempt', 'queue', 'priority', 'expires_at', 'type')
  if t.status == 'PENDING' or t.status == 'RETRYING' then
    if t.expires_at and t.expires_at ~= '' and tonumber(t.expires_at) <= tonumber(now_ms) then
      rcall('HSET', tkey, 'status', 'EXPIRED', 'finished_at', now_ms, 'updated_at', now_ms)
      rcall('HINCRBY', KEYS[6], outcome_field(t.queue, t.type, 'EXPIRED'), 1)
      emit(KEYS[3], KEYS[4], 'task.expired', id, t.queue, 'EXPIRED', t.attempt, now_ms, now_iso)
    else
      local stream = KEYS[13] .. t.queue .. ':' .. t.priority
      local eid = rcall('XADD', stream, '*', 'task_id', id, 'attempt', tonumber(t.attempt) + 1)
      rcall('HSET', tkey, 'status', 'QUEUED', 'enqueued_at', now_ms, 'updated_at', now_ms, 'entry_id', eid)
      ring(KEYS[14] .. t.queue, KEYS[10], KEYS[11], t.queue)
      emit(KEYS[3], KEYS[4], 'task.queued', id, t.queue, 'QUEUED', t.attempt, now_ms, now_iso)
      queued = queued + 1
    end
    rcall('PEXPIRE', tkey, ARGV[4])
  end
end

for i = 7, #ARGV do
  local id = ARGV[i]
  local ok, err = pcall(enqueue_one, id)
  if not ok then
    local reason = 'the scheduler could not queue it: ' .. error_text(err)
    quarantine(q, id, reason)
    quarantined[#quarantined + 1] = id
    quarantined[#quarantined + 1] = reason
  end
  rcall('ZREM', KEYS[1], id)
end
return {queued, quarantined}
