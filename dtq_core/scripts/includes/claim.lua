-- Decide what a delivered stream entry means and, when it is runnable, move the task to RUNNING.
-- Needs: common. Callers run claim_entry under pcall and hand a failure to quarantine_entry.
-- ctx.lim (set by fetchTasks when the queue has limits): group limits are checked per new claim.
-- #include limits
-- ctx fields (also what quarantine needs): K (partition_keys of KEYS[1]), group, worker_id, now_ms,
-- now_iso, retention_ms, R (includes/retain.lua: how finished tasks are kept), dlq_enabled, dlq_maxlen, and the K names as the code below reads them:
-- task_prefix, paused_key, dlq_key, counters_key, running_key, outcomes_key (the per-outcome task
-- counts behind dtq_tasks_total, as completeTasks keeps them).
-- The running index (running_key, a zset of RUNNING task ids scored by the owner's last sign of
-- life: claim or heartbeat) lets the leader's sweep find RUNNING tasks whose entry vanished.
-- ctx.started, when the caller sets it to a list, collects the claims' score/member pairs instead
-- of one ZADD each; the caller writes them in one ZADD before it returns.
-- A partition holds one queue, so the partition's pause flag is the queue's.
local function is_paused(ctx)
  if ctx.paused == nil then ctx.paused = rcall('EXISTS', ctx.paused_key) == 1 end
  return ctx.paused
end

local function count_outcome(ctx, queue, ttype, status)
  rcall('HINCRBY', ctx.outcomes_key, outcome_field(queue, ttype, status), 1)
  history_add(ctx.K, ctx.now_ms, ttype, status)
end

local function finish_entry(ctx, stream, entry_id)
  rcall('XACK', stream, ctx.group, entry_id)
  rcall('XDEL', stream, entry_id)
end

-- The fields a claim reads (claim_entry lists them again in its HMGET and table constructor;
-- tests/worker/test_function_library.py holds the three to the same names).
local TASK_FIELDS = {'status', 'attempt', 'max_attempts', 'type', 'payload', 'timeout_s', 'queue',
                     'expires_at', 'entry_id', 'priority', 'errors', 'cancel_requested', 'handler',
                     'group_key', 'workflow_id', 'headers'}

-- The worker running attempt t.attempt went silent: honour a cancel it never got to act on, or count
-- the lost attempt against the budget (DLQ when spent). The caller finishes the old entry.
-- Returns 'cancelled', 'dead', or 'again' (run the next attempt).
local function lose_attempt(ctx, tkey, task_id, t)
  local cur = tonumber(t.attempt)
  if t.cancel_requested == '1' then
    retain_finish(ctx.R, ctx.K, task_id, 'CANCELLED', ctx.now_ms, nil,
                  {'status', 'CANCELLED', 'finished_at', ctx.now_ms, 'updated_at', ctx.now_ms})
    rcall('ZREM', ctx.running_key, task_id)
    limits_left_running(ctx.K, task_id)
    count_outcome(ctx, t.queue, t.type, 'CANCELLED')
    emit(ctx.K, 'task.cancelled', task_id, t.queue, 'CANCELLED', cur, ctx.now_ms, ctx.now_iso)
    return 'cancelled'
  end
  local msg = 'worker lost during attempt ' .. cur
  local errors = push_error(t.errors, cur, 'dtq.WorkerLost', msg, '', ctx.now_iso)  -- may fail: before any write
  rcall('HINCRBY', ctx.counters_key, 'redeliveries', 1)
  rcall('HSET', tkey, 'errors', errors, 'last_error', 'dtq.WorkerLost: ' .. msg)
  if cur >= tonumber(t.max_attempts) then
    local st = dead_letter(ctx.K, task_id, t.queue, t.type, cur, 'dtq.WorkerLost', msg, ctx.now_ms,
                           ctx.dlq_enabled, ctx.dlq_maxlen)
    retain_finish(ctx.R, ctx.K, task_id, st, ctx.now_ms, nil, {'finished_at', ctx.now_ms, 'updated_at', ctx.now_ms})
    rcall('ZREM', ctx.running_key, task_id)
    limits_left_running(ctx.K, task_id)
    count_outcome(ctx, t.queue, t.type, st)
    emit(ctx.K, st == 'FAILED' and 'task.failed' or 'task.dead_lettered',
         task_id, t.queue, st, cur, ctx.now_ms, ctx.now_iso)
    return 'dead'
  end
  return 'again'
end

-- Returns {'run', entry_id, stream, task_id, attempt, max_attempts, type, payload, timeout_s,
-- queue, priority, handler ('' = the type's own), headers ('' = none), workflow context ('' or
-- "<workflow id>|<step>|<parent result JSON>")} or {outcome, reason} where outcome is absorbed|missing|expired|deferred|dead|cancelled
-- (or, held back by its group's limits, {'parked'} / {'deferred'}: includes/limits.lua)
-- (a reason only for absorbed, dead and cancelled: the worker logs those).
local function claim_entry(ctx, stream, entry_id, task_id, entry_attempt, reclaim)
  local tkey = ctx.task_prefix .. task_id
  -- TASK_FIELDS, into a table constructor (sized once, where read_task's loop grows it 4 times).
  local v = rcall('HMGET', tkey, 'status', 'attempt', 'max_attempts', 'type', 'payload', 'timeout_s', 'queue',
                  'expires_at', 'entry_id', 'priority', 'errors', 'cancel_requested', 'handler', 'group_key',
                  'workflow_id', 'headers')
  local t = {status = v[1], attempt = v[2], max_attempts = v[3], type = v[4], payload = v[5], timeout_s = v[6],
             queue = v[7], expires_at = v[8], entry_id = v[9], priority = v[10], errors = v[11],
             cancel_requested = v[12], handler = v[13], group_key = v[14], workflow_id = v[15], headers = v[16]}
  if not t.status then
    finish_entry(ctx, stream, entry_id)
    return {'missing'}
  end
  local status, cur, ea = t.status, tonumber(t.attempt), tonumber(entry_attempt)
  -- The attempt as the HSET below writes it: the entry's own text unless it is bumped (a number
  -- passed to redis.call is printed with snprintf, every call).
  local ea_text = entry_attempt
  if reclaim and status == 'RUNNING' and t.entry_id == entry_id then
    -- The worker that ran this attempt went silent past the visibility timeout: count the lost
    -- attempt against the budget and run the next one (or honour a cancel it never acted on).
    local lost = lose_attempt(ctx, tkey, task_id, t)
    if lost ~= 'again' then
      finish_entry(ctx, stream, entry_id)
      return {lost, 'worker lost during attempt ' .. t.attempt}
    end
    ea = cur + 1
    ea_text = ea
  elseif not (status == 'QUEUED' and ea == cur + 1) then
    -- Terminal, superseded, or already started under another entry: a duplicate to absorb.
    finish_entry(ctx, stream, entry_id)
    rcall('HINCRBY', ctx.counters_key, 'absorbed', 1)
    return {'absorbed', 'task is ' .. status .. ' at attempt ' .. tostring(t.attempt) .. ', entry is for attempt '
            .. tostring(entry_attempt)}
  end
  if t.expires_at and t.expires_at ~= '' and tonumber(t.expires_at) <= tonumber(ctx.now_ms) then
    retain_finish(ctx.R, ctx.K, task_id, 'EXPIRED', ctx.now_ms, nil,
                  {'status', 'EXPIRED', 'finished_at', ctx.now_ms, 'updated_at', ctx.now_ms})
    rcall('ZREM', ctx.running_key, task_id)
    if status == 'RUNNING' then limits_left_running(ctx.K, task_id) end
    finish_entry(ctx, stream, entry_id)
    count_outcome(ctx, t.queue, t.type, 'EXPIRED')
    emit(ctx.K, 'task.expired', task_id, t.queue, 'EXPIRED', cur, ctx.now_ms, ctx.now_iso)
    return {'expired'}
  end
  if is_paused(ctx) then
    -- Reclaimed from a lost worker while paused (a fetch does not read a paused queue at all):
    -- put it back at the tail instead of starting it.
    local new_id = rcall('XADD', stream, '*', 'task_id', task_id, 'attempt', ea)
    rcall('HSET', tkey, 'status', 'QUEUED', 'attempt', ea - 1, 'entry_id', new_id)
    rcall('ZREM', ctx.running_key, task_id)
    if status == 'RUNNING' then limits_left_running(ctx.K, task_id) end
    finish_entry(ctx, stream, entry_id)
    if status ~= 'QUEUED' then  -- RUNNING -> QUEUED is a state change: say so
      rcall('HSET', tkey, 'updated_at', ctx.now_ms, 'enqueued_at', ctx.now_ms)
      emit(ctx.K, 'task.queued', task_id, t.queue, 'QUEUED', ea - 1, ctx.now_ms, ctx.now_iso)
    end
    return {'deferred'}
  end
  -- A reclaim (a crashed worker's attempt run again) is not judged by the limits nor counted in
  -- the rate windows: it keeps the slots the lost attempt held, and its first start was counted
  -- (docs/tasks.md, "Flow control": a stated exception, as for any at-least-once re-run).
  if ctx.lim and not reclaim then
    local held = limits_admit(ctx.K, ctx.lim, tkey, task_id, t, ea, entry_id, ctx.lim_now)
    if held == 'parked' then
      -- Acknowledged, not deleted: the parked task's entry stays in the stream for the depth gate
      -- and the waiting count until the task leaves its wait list (includes/limits.lua).
      rcall('XACK', stream, ctx.group, entry_id)
    elseif held then
      finish_entry(ctx, stream, entry_id)
    end
    if held then
      limits_throttled(ctx.K, 1)
      return {held}
    end
    -- The start's member in the rate windows: this claim's own (includes/limits.lua).
    ctx.lim_started[#ctx.lim_started + 1] = limits_member(task_id, ea, entry_id)
  end
  -- The attempt starts with no cancel on record: a lean record (includes/create_task.lua) has no
  -- cancel_requested at all, so one left set is removed, not written as 0.
  if t.cancel_requested and t.cancel_requested ~= '0' then rcall('HDEL', tkey, 'cancel_requested') end
  rcall('HSET', tkey, 'status', 'RUNNING', 'attempt', ea_text, 'started_at', ctx.now_ms,
        'updated_at', ctx.now_ms, 'worker_id', ctx.worker_id, 'entry_id', entry_id)
  rcall('PEXPIRE', tkey, retention_px(ctx.R, 1))
  if ctx.started then  -- the caller adds the batch to the running index in one ZADD
    local n = #ctx.started
    ctx.started[n + 1], ctx.started[n + 2] = ctx.now_ms, task_id
    if n >= 2000 then  -- within Lua's unpack limit (8000 values), however large the fetch
      rcall('ZADD', ctx.running_key, unpack(ctx.started))
      ctx.started = {}
    end
  else
    rcall('ZADD', ctx.running_key, ctx.now_ms, task_id)
  end
  emit(ctx.K, 'task.started', task_id, t.queue, 'RUNNING', ea, ctx.now_ms, ctx.now_iso)
  -- Its headers ('' when none: issue 25), and for a workflow's step (issue 23)
  -- "<workflow id>|<step>|<parent result JSON>" ('' otherwise).
  local wf = ''
  if t.workflow_id then
    local step, parent = unpack(rcall('HMGET', tkey, 'workflow_step', 'parent_result'))
    wf = t.workflow_id .. '|' .. (step or '') .. '|' .. (parent or 'null')
  end
  return {'run', entry_id, stream, task_id, ea, t.max_attempts, t.type, t.payload, t.timeout_s, t.queue, t.priority,
          t.handler or '', t.headers or '', wf}
end

-- A claim that failed on a corrupt task field (err, caught by the caller's pcall): quarantine the
-- task and settle the entry, so the rest of the batch is claimed and this entry is neither
-- delivered nor reclaimed again and again. Returns the row reported for the worker's log.
local function quarantine_entry(ctx, stream, entry_id, task_id, err)
  local reason = 'entry ' .. entry_id .. ' could not be claimed: ' .. error_text(err)
  quarantine(ctx, task_id or '', reason)
  if task_id then pcall(limits_left_running, ctx.K, task_id) end
  redis.pcall('XACK', stream, ctx.group, entry_id)
  redis.pcall('XDEL', stream, entry_id)
  return {'quarantined', reason}
end

-- An empty now (ms) means "when this runs": see server_now.
-- The context reads the partition prefix KEYS[1] and ARGV[argv_offset .. argv_offset + 6]
-- (CLAIM_ARGS), which every script including this one declares first, in this order; the
-- retention among them is includes/retain.lua's retention argument.
local function claim_context(argv_offset)
  local K = partition_keys(KEYS[1])
  local now_ms, now_iso = ARGV[argv_offset + 2], ARGV[argv_offset + 3]
  local server_clock = now_ms == ''
  if server_clock then now_ms, now_iso = server_now() end
  local R = retention_policy(ARGV[argv_offset + 4])
  return {K = K, group = ARGV[argv_offset], worker_id = ARGV[argv_offset + 1], now_ms = now_ms,
          now_iso = now_iso, server_clock = server_clock, retention_ms = R.task_ms, R = R,
          dlq_enabled = ARGV[argv_offset + 5], dlq_maxlen = ARGV[argv_offset + 6],
          paused_key = K.paused, dlq_key = K.dlq, counters_key = K.stats_counters, running_key = K.running,
          outcomes_key = K.stats_tasks, task_prefix = K.task_prefix}
end
