-- Retention of finished tasks: what a finished task's record keeps, for how long, and how many a
-- partition keeps per outcome, so that the settings bound Redis memory (docs/deployment.md,
-- "Redis memory"). Inlined by common.lua (it needs rcall and partition_keys).
--
-- The scripts that end tasks take a retention argument (dtq_core.config.DtqConfig.retention_arg):
--   "<task ms>:<succeeded ms>:<succeeded count>:<failed count>:<keep payload>"
-- or a plain "<task ms>" (every record kept whole for that long, no count bound: what the
-- scripts did before retention had a policy).
-- Outcomes:
--   succeeded class (SUCCEEDED, CANCELLED, EXPIRED): never run again, so the record is
--     compacted (unless keep payload is 'all', or the task is a Django task, whose result reader
--     rebuilds the call from the payload), lives <succeeded ms>, and its id goes to the tail of
--     the partition's retain:ok list; past <succeeded count> the oldest ids are popped and their
--     task and result keys deleted. A list (about 42 bytes an id, against a zset's 134) is
--     enough: such a task finishes once, so an id is listed once.
--   failed class (FAILED, DEAD_LETTERED): kept whole (the DLQ retry needs payload and errors)
--     for <task ms>, scored by finish time in the retain:failed zset, which a DLQ retry leaves
--     (retain_unfinish) so a retried task is never trimmed while it runs again.
-- A count of 0 turns that count bound off (and the index with it). Indexing and the count trim
-- run once per script (retain_trim): a batch pays one RPUSH (one ZADD for failures) and, once
-- over the count, one LPOP, one ZREM (recent index) and one DEL, however many tasks it ends.

local RETAIN_COMPACT = {SUCCEEDED = true, CANCELLED = true, EXPIRED = true}
local RETAIN_FAILED = {FAILED = true, DEAD_LETTERED = true}
-- What a compact record keeps: what the API shows of a finished task besides its status and
-- finish time. Not the completion mark ('completed', 32 bytes, a listpack size class): a
-- SUCCEEDED compact record is told resent by its attempt (completeTasks).
-- The worker that ran it stays (which peer took over is what an operator asks after a crash);
-- max_attempts does not (worth less than the 16 bytes that keep a typical record in its
-- 192-byte allocation). The error history and last error stay when there are any (a task that
-- needed retries): the common first-try success keeps the smallest record.
local RETAIN_FIELDS = {'type', 'queue', 'priority', 'attempt', 'created_at', 'started_at', 'worker_id',
                       'result_truncated', 'result_null', 'last_error', 'errors', 'handler', 'periodic_name',
                       'scheduled_for', 'workflow_id', 'workflow_step', 'progress_done', 'progress_total',
                       'progress_message', 'progress_at', 'headers'}
local DJANGO_TYPES = {['django.task'] = true, ['django.atask'] = true}  -- queued before per-function types
-- RETAIN_FIELDS as a set (a constructor: a fill loop cost every call of every script a µs).
local RETAIN_FIELD = {type = true, queue = true, priority = true, attempt = true, created_at = true,
                      started_at = true, worker_id = true, result_truncated = true, result_null = true,
                      last_error = true, errors = true, handler = true, periodic_name = true,
                      scheduled_for = true, workflow_id = true, workflow_step = true, progress_done = true,
                      progress_total = true, progress_message = true, progress_at = true, headers = true}
-- A kept field at the value the API reads when the field is missing: not written.
local RETAIN_DEFAULT = {result_truncated = '0', errors = '[]', priority = 'normal'}
local RETAIN_TRIM_MAX = 1000  -- ids trimmed per script call at most: a lowered count catches up over calls

-- Parsed retention arguments, by their text: a caller passes the same one on every call, and in a
-- function library this outlives the call (parsing it was a seventh of an empty completion's Redis
-- CPU, issue 20). Bounded like PARTITION_CACHE.
local RETENTION_PARSED, retention_parsed_size = {}, 0

local function retention_policy(arg)
  local p = RETENTION_PARSED[arg]
  if not p then
    local task_ms, ok_ms, ok_count, failed_count, keep = string.match(tostring(arg), '^(%d+):(%d+):(%d+):(%d+):(.+)$')
    if not task_ms then  -- the plain "<task ms>" form, or a shorter one
      local parts = {}
      for part in string.gmatch(tostring(arg), '[^:]+') do parts[#parts + 1] = part end
      task_ms, ok_ms, ok_count, failed_count, keep = parts[1], parts[2], parts[3], parts[4], parts[5]
    end
    task_ms = tonumber(task_ms)
    if not task_ms then return error('not a retention argument: ' .. tostring(arg), 0) end
    if not in_library then  -- nothing outlives the call (partition_keys): no cache to fill
      return {task_ms = task_ms, ok_ms = tonumber(ok_ms) or task_ms, ok_count = tonumber(ok_count) or 0,
              failed_count = tonumber(failed_count) or 0, keep_payload = keep or 'all', ok_ids = {}, failed_args = {}}
    end
    p = {task_ms, tonumber(ok_ms) or task_ms, tonumber(ok_count) or 0, tonumber(failed_count) or 0, keep or 'all'}
    if retention_parsed_size >= 64 then RETENTION_PARSED, retention_parsed_size = {}, 0 end
    RETENTION_PARSED[arg], retention_parsed_size = p, retention_parsed_size + 1
  end
  return {task_ms = p[1], ok_ms = p[2], ok_count = p[3], failed_count = p[4], keep_payload = p[5],
          parsed = p, ok_ids = {}, failed_args = {}}
end

-- A retention age (i: 1 task, 2 succeeded) as the text PEXPIRE gets: a number passed to
-- redis.call is printed with snprintf on every call, this text once per parsed argument.
local function retention_px(R, i)
  local p = R.parsed
  if not p then return i == 1 and R.task_ms or R.ok_ms end  -- not cached (not a function library)
  local text = p[i + 5]
  if not text then
    text = string.format('%d', p[i])
    p[i + 5] = text
  end
  return text
end

local function retain_drop(K, ids)
  -- Out of the recent-tasks index too: a listing would only pass over them.
  for i = 1, #ids, 500 do rcall('ZREM', K.recent, unpack(ids, i, math.min(i + 499, #ids))) end
  local keys = {}
  for _, id in ipairs(ids) do
    keys[#keys + 1] = K.task_prefix .. id
    keys[#keys + 1] = K.result_prefix .. id
    if #keys >= 500 then rcall('DEL', unpack(keys)); keys = {} end
  end
  if #keys > 0 then rcall('DEL', unpack(keys)) end
end

-- A failed record leaves with its dead letter, so the DLQ never offers one whose task is gone
-- (the DLQ's own cap may order a batch's dead letters otherwise than the finish times here).
local function retain_drop_failed(K, ids)
  local evicted = 0
  for _, id in ipairs(ids) do
    local t = read_task(K.task_prefix .. id, 'status', 'dlq_entry_id', 'queue')
    if t.status == 'DEAD_LETTERED' and t.dlq_entry_id and t.dlq_entry_id ~= '' then
      if rcall('XDEL', K.dlq, t.dlq_entry_id) == 1 then
        rcall('HINCRBY', K.dlq .. ':counts', t.queue or '', -1)
        evicted = evicted + 1
      end
    end
  end
  if evicted > 0 then rcall('HINCRBY', K.stats_counters, 'dlq_trimmed', evicted) end
  retain_drop(K, ids)
end

-- Index the tasks ended since the last call (one RPUSH and one ZADD for a whole batch), then
-- apply the count bounds (and the failed class's age, whose record a DLQ discard may have kept
-- alive past its index entry): once, after a script's last finish.
local function retain_trim(R, K, now_ms)
  local ok_len = nil
  for i = 1, #R.ok_ids, 500 do
    ok_len = rcall('RPUSH', K.retain_ok, unpack(R.ok_ids, i, math.min(i + 499, #R.ok_ids)))
  end
  R.ok_ids = {}
  if ok_len and ok_len > R.ok_count then
    local ids = rcall('LPOP', K.retain_ok, math.min(ok_len - R.ok_count, RETAIN_TRIM_MAX))
    if ids then retain_drop(K, ids) end
  end
  local failed = R.failed_args
  for i = 1, #failed, 1000 do
    rcall('ZADD', K.retain_failed, unpack(failed, i, math.min(i + 999, #failed)))
  end
  R.failed_args = {}
  if #failed > 0 then
    local old = rcall('ZRANGEBYSCORE', K.retain_failed, '-inf', tonumber(now_ms) - R.task_ms, 'LIMIT', 0,
                      RETAIN_TRIM_MAX)
    if #old > 0 then
      rcall('ZREM', K.retain_failed, unpack(old))
      retain_drop_failed(K, old)
    end
    if R.failed_count > 0 then
      local excess = rcall('ZCARD', K.retain_failed) - R.failed_count
      if excess > 0 then
        local ids = {}
        local popped = rcall('ZPOPMIN', K.retain_failed, math.min(excess, RETAIN_TRIM_MAX))
        for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
        retain_drop_failed(K, ids)
      end
    end
  end
end

-- A workflow's step ended (issue 23): its outbox entry, in the task's partition and in the script
-- that ended it, so no crash can fall between the two. The result (or the error) is copied into it:
-- retention may trim the record before the workflow is advanced (dtq_core/worker/workflows.py
-- reads the entry, advances the workflow in its own slot and deletes the entry last).
local function wf_outbox_add(K, tkey, task_id, wid, wstep, status, now_ms)
  local r
  if status == 'SUCCEEDED' then
    r = rcall('GET', K.result_prefix .. task_id) or 'null'
  else
    r = rcall('HGET', tkey, 'last_error') or ''
  end
  rcall('HSET', K.wf_outbox, task_id, cjson.encode({w = wid, s = tonumber(wstep) or -1, st = status, r = r}))
  rcall('ZADD', K.wf_outbox_due, now_ms, task_id)
end

-- The task just ended with status: write what the caller had to write (writes: HSET field/value
-- pairs, status among them; nil when the caller wrote already) in the shape of its outcome, give
-- the record the lifetime of its outcome and index it. t holds the RETAIN_FIELDS the caller read
-- before (nil: read here when needed). A caller that ends many tasks sets R.defer and calls
-- retain_trim once at its end.
local function retain_finish(R, K, task_id, status, now_ms, t, writes)
  local tkey = K.task_prefix .. task_id
  local compact = RETAIN_COMPACT[status] and R.keep_payload ~= 'all'
  if compact then
    if not t then t = read_task(tkey, unpack(RETAIN_FIELDS)) end
    -- A Django task's result reader rebuilds the call from its payload: kept whole.
    compact = not ((t.handler and t.handler ~= '') or DJANGO_TYPES[t.type])
  end
  -- A workflow's step (issue 23): read before a compaction rewrites the record. A caller that
  -- read the record (t) read workflow_id too, so a task of no workflow pays nothing here.
  local wid = t and t.workflow_id
  if wid == nil then wid = rcall('HGET', tkey, 'workflow_id') end
  local wstep = wid and ((t and t.workflow_step) or rcall('HGET', tkey, 'workflow_step'))
  if compact then
    -- What the record keeps: the caller's writes over what it read (t), without building a third
    -- table of every kept field (a per-task table that grew four times as it filled).
    local over = nil
    for i = 1, #(writes or {}), 2 do
      if RETAIN_FIELD[writes[i]] then
        over = over or {}
        over[writes[i]] = writes[i + 1]
      end
    end
    if t.progress_at and not t.progress_done then
      -- The caller read progress_at alone (completeTasks: one field, not four, for the tasks
      -- that never reported progress): the rest of the progress only for those that did.
      local done, total, message = unpack(rcall('HMGET', tkey, 'progress_done', 'progress_total', 'progress_message'))
      over = over or {}
      if over.progress_done == nil then over.progress_done = done end
      if over.progress_total == nil then over.progress_total = total end
      if over.progress_message == nil then over.progress_message = message end
    end
    if wid and not t.workflow_step then  -- read above (the caller did not)
      over = over or {}
      if over.workflow_step == nil then over.workflow_step = wstep end
    end
    local f = {'status', status, 'finished_at', now_ms}
    local n = 4
    for _, name in ipairs(RETAIN_FIELDS) do
      local value = over and over[name]
      if value == nil then value = t[name] end
      -- Left out: empty, and what the API reads as the default when missing (a result_truncated
      -- of 0, no errors, the normal priority).
      if value and value ~= '' and RETAIN_DEFAULT[name] ~= value then
        f[n + 1], f[n + 2] = name, value
        n = n + 2
      end
    end
    -- DEL and a new HSET, not HDEL: a hash that a long payload made a hashtable stays one.
    rcall('DEL', tkey)
    rcall('HSET', tkey, unpack(f))
  elseif writes then
    rcall('HSET', tkey, unpack(writes))
  end
  if RETAIN_COMPACT[status] then
    rcall('PEXPIRE', tkey, retention_px(R, 2))
    if R.ok_count > 0 then R.ok_ids[#R.ok_ids + 1] = task_id end
  else
    rcall('PEXPIRE', tkey, retention_px(R, 1))
    if RETAIN_FAILED[status] and R.failed_count > 0 then
      R.failed_args[#R.failed_args + 1] = now_ms
      R.failed_args[#R.failed_args + 1] = task_id
    end
  end
  if wid then wf_outbox_add(K, tkey, task_id, wid, wstep, status, now_ms) end
  if not R.defer then retain_trim(R, K, now_ms) end
end

-- A dead letter is retried: its task runs again, so the failed class's trim must not delete it.
local function retain_unfinish(K, task_id)
  rcall('ZREM', K.retain_failed, task_id)
end
