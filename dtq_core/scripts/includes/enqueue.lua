-- One submit in a partition whose owner the caller has checked: the idempotency key, the unique
-- key, the depth gate, then the record (create_task). Shared by enqueueTask (one task a call) and
-- enqueueTasks (a batch of one partition in one call: the call's own cost, the owner check and the
-- depth gate's reads paid once, issue 20).
-- Needs: common, create_task, unique.

-- The EXISTING reply for a task already there (why: 'idem' or 'unique'), its record and result
-- read only when asked for.
local function existing_reply(K, task_id, want_record, why)
  local tkey = K.task_prefix .. task_id
  local record, result = {}, ''
  if want_record then
    record = rcall('HGETALL', tkey)
    result = rcall('GET', K.result_prefix .. task_id) or ''
  end
  return {CODE.EXISTING, task_id, rcall('HGET', tkey, 'status') or '', record, result, why}
end

-- Arguments as enqueueTask's ARGV (max_depth and due as numbers, want_record a boolean); the task
-- hash's field/value pairs are fields[from..to]; unique_arg '' = none. depth: this partition's
-- stream entries as the call counted them so far (nil: not read yet). Positional, not a table: a
-- table per submit cost the single submit 4 % more Redis instructions.
-- Returns enqueueTask's reply (its Output header) and the depth, counted on as tasks are queued,
-- so that a batch reads it once and every task in it is gated as if submitted alone.
local function enqueue_one(K, queue, task_id, priority, now_ms, now_iso, retention_ms, idem_ttl_ms, max_depth,
                           due, idem_arg, recent_cap, want_record, fields, from, to, unique_arg, depth)
  local idem_key = nil
  if idem_arg ~= '' then idem_key = K.idem_prefix .. idem_arg end
  if idem_key then
    local existing = rcall('GET', idem_key)
    -- Even when the first task's record has already expired (DTQ_TASK_RETENTION_S shorter than
    -- DTQ_IDEM_TTL_S), the key still stands for it: a second task could repeat its side effects.
    if existing then return existing_reply(K, existing, want_record, 'idem'), depth end
  end
  local U = nil
  if unique_arg ~= '' then
    local mode, window_ms, key = string.match(unique_arg, '^([^|]*)|(%d+)|(.*)$')
    U = {key = K.unique_prefix .. key, mode = mode, window_ms = tonumber(window_ms),
         now = tonumber(now_ms), due = due, retention_ms = tonumber(retention_ms)}
    local holder = unique_holder(K, U)
    if holder then
      if U.mode == 'debounce' then unique_debounce(K, U, holder, fields, from, to) end
      -- The idempotency key stands for the answer this submit got: its retry gets the same one.
      if idem_key then rcall('SET', idem_key, holder, 'PX', tonumber(idem_ttl_ms) + math.max(0, U.due - U.now)) end
      return existing_reply(K, holder, want_record, 'unique'), depth
    end
  end
  if due == 0 and max_depth > 0 then
    if not depth then
      depth = 0
      for _, p in ipairs({'high', 'normal', 'low'}) do depth = depth + rcall('XLEN', stream_key(K, queue, p)) end
    end
    if depth >= max_depth then return {CODE.QUEUE_FULL, depth}, depth end
  end
  local status, written = create_task(K, {
    task_id = task_id, queue = queue, priority = priority, now_ms = now_ms, now_iso = now_iso, due = due,
    retention_ms = retention_ms, idem_key = idem_key, idem_ttl_ms = idem_ttl_ms, recent_cap = recent_cap,
    fields = fields, fields_from = from, fields_to = to, want_record = want_record})
  if status == 'QUEUED' and depth then depth = depth + 1 end
  if U then unique_hold(U, task_id) end
  -- A hash that was new holds exactly what was written: no HGETALL for it.
  local record = {}
  if want_record then record = written or rcall('HGETALL', K.task_prefix .. task_id) end
  return {CODE.OK, task_id, status, record}, depth
end
