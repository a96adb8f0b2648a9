--[[
  Put one partition's claimed schedule entries into their streams (XADD before the claim is
  removed), moving PENDING/RETRYING tasks to QUEUED with the next attempt number. A task that
  moved on meanwhile (cancelled, or already queued by a duplicate claim) is not queued again.
  Fenced on the partition's lease. A task whose record cannot be processed (a corrupt field) is
  quarantined (see quarantine in common.lua), alone: the rest of the batch is queued, and its
  claim is removed all the same. No owner check: the entries are already in the partition (a
  queue is deleted only once its schedule and claims are empty).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] worker id  ARGV[2] now (ms)  ARGV[3] now (ISO)
    ARGV[4] retention (includes/retain.lua: retention_policy)
    ARGV[5] dlq enabled (1/0)  ARGV[6] dlq maxlen  ARGV[7..] task ids
  Output:
    {number of tasks queued, {task id, reason, ...} of those quarantined}, or CODE.LEASE_LOST when
    this worker does not hold the lease
]]
-- #include common
local K = partition_keys(KEYS[1])
if rcall('GET', K.lock) ~= ARGV[1] then return CODE.LEASE_LOST end
local now_ms, now_iso = ARGV[2], ARGV[3]
local R = retention_policy(ARGV[4])
R.defer = true  -- one count trim for the whole batch
local q = {K = K, now_ms = now_ms, now_iso = now_iso, retention_ms = R.task_ms, dlq_enabled = ARGV[5],
           dlq_maxlen = ARGV[6], R = R}
local queued, quarantined = 0, {}
local function enqueue_one(id)
  local tkey = K.task_prefix .. id
  local t = read_task(tkey, 'status', 'attempt', 'queue', 'priority', 'expires_at', 'type')
  if t.status == 'PENDING' or t.status == 'RETRYING' then
    if t.expires_at and t.expires_at ~= '' and tonumber(t.expires_at) <= tonumber(now_ms) then
      retain_finish(R, K, id, 'EXPIRED', now_ms, nil, {'status', 'EXPIRED', 'finished_at', now_ms,
                    'updated_at', now_ms})
      rcall('HINCRBY', K.stats_tasks, outcome_field(t.queue, t.type, 'EXPIRED'), 1)
      history_add(K, now_ms, t.type, 'EXPIRED')
      emit(K, 'task.expired', id, t.queue, 'EXPIRED', t.attempt, now_ms, now_iso)
    else
      local stream = stream_key(K, t.queue, t.priority)
      local eid = rcall('XADD', stream, '*', 'task_id', id, 'attempt', tonumber(t.attempt) + 1)
      rcall('HSET', tkey, 'status', 'QUEUED', 'enqueued_at', now_ms, 'updated_at', now_ms, 'entry_id', eid)
      ring(K)
      emit(K, 'task.queued', id, t.queue, 'QUEUED', t.attempt, now_ms, now_iso)
      queued = queued + 1
      rcall('PEXPIRE', tkey, R.task_ms)
    end
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
  rcall('ZREM', K.schedule_claims, id)
end
retain_trim(R, K, now_ms)
return {queued, quarantined}
