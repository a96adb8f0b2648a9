--[[
  Leader sweep for RUNNING tasks whose stream entry vanished (trimmed or XDELed while pending,
  which the reaper finds deleted and drops from the PEL): the visibility reaper can no
  longer see them, so the task hash is the only record. A task qualifies when its owner showed
  no sign of life (claim or heartbeat) since the cutoff and its entry is no longer both in the
  stream and pending. Its lost attempt counts like a crash redelivery: a new entry is queued
  (or the task is dead-lettered when its budget is spent, or cancelled if that was requested).
  Works on one partition (its running index); fenced on the partition's lease, like the other
  leader scripts.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1..7] group, worker id, now (ms), now (ISO), retention (retain.lua), dlq enabled (1/0),
               dlq maxlen
    ARGV[8] cutoff (ms)   ARGV[9] limit
  A task whose record cannot be processed (a corrupt field) is quarantined alone (see quarantine
  in common.lua) and leaves the running index, so the sweep moves on.
  Output:
    {number of tasks recovered (quarantined ones included), {task id, reason, ...} of those
    quarantined}, or CODE.LEASE_LOST when this worker does not hold the lease
]]
-- #include common
-- #include claim
local ctx = claim_context(1)
if rcall('GET', ctx.K.lock) ~= ctx.worker_id then return CODE.LEASE_LOST end
local recovered, quarantined = 0, {}
local function recover(task_id)
  local tkey = ctx.task_prefix .. task_id
  local t = read_task(tkey, unpack(TASK_FIELDS))
  if t.status ~= 'RUNNING' then
    rcall('ZREM', ctx.running_key, task_id)  -- moved on (or expired) by a path that keeps no index
    limits_left_running(ctx.K, task_id)
  else
    local stream = stream_key(ctx.K, t.queue, t.priority)
    local entry_id = t.entry_id or ''
    local exists = entry_id ~= '' and #rcall('XRANGE', stream, entry_id, entry_id) > 0
    local pel = exists and redis.pcall('XPENDING', stream, ctx.group, entry_id, entry_id, 1)
    local pending = type(pel) == 'table' and #pel > 0  -- an error reply (no group) has no rows
    if exists and pending then
      -- Still reclaimable: the visibility reaper owns it. Look again one cutoff later.
      rcall('ZADD', ctx.running_key, 'XX', ctx.now_ms, task_id)
    else
      if entry_id ~= '' then
        -- pcall: a stream recreated without its group must not abort the whole sweep.
        redis.pcall('XACK', stream, ctx.group, entry_id)
        rcall('XDEL', stream, entry_id)
      end
      local lost = lose_attempt(ctx, tkey, task_id, t)
      if lost == 'again' then
        local cur = tonumber(t.attempt)
        local new_id = rcall('XADD', stream, '*', 'task_id', task_id, 'attempt', cur + 1)
        ring(ctx.K)
        rcall('HSET', tkey, 'status', 'QUEUED', 'entry_id', new_id, 'enqueued_at', ctx.now_ms,
              'updated_at', ctx.now_ms)
        rcall('PEXPIRE', tkey, ctx.retention_ms)
        rcall('ZREM', ctx.running_key, task_id)
        limits_left_running(ctx.K, task_id)
        emit(ctx.K, 'task.queued', task_id, t.queue, 'QUEUED', cur, ctx.now_ms, ctx.now_iso)
      end
      recovered = recovered + 1
    end
  end
end

for _, task_id in ipairs(rcall('ZRANGEBYSCORE', ctx.running_key, '-inf', ARGV[8], 'LIMIT', 0, ARGV[9])) do
  local ok, err = pcall(recover, task_id)
  if not ok then
    local reason = 'the lost-task sweep could not recover it: ' .. error_text(err)
    quarantine(ctx, task_id, reason)
    rcall('ZREM', ctx.running_key, task_id)
    limits_left_running(ctx.K, task_id)
    quarantined[#quarantined + 1] = task_id
    quarantined[#quarantined + 1] = reason
    recovered = recovered + 1
  end
end
return {recovered, quarantined}
