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
    in common.lua)  ARGV[14..#ARGV-1] task hash field/value pairs
    ARGV[#ARGV] (issue 22, appended after the pairs) unique task: '' = none, else
    "<mode>|<window ms>|<key>" (mode while_active/throttle/debounce; window 0: while_active's
    default cap, the retention; the key last, as it may hold a |)
  Output:
    {OK, id, status, record} created; {EXISTING, existing id, its status, record, result, why}
    idempotency key seen (why 'idem') or unique key held (why 'unique': for debounce, the
    waiting task now carries this submit's payload and due time); {QUEUE_FULL, depth of this
    partition}; {PARTITION_CLOSED} the owner key names another layout (codes: CODE in
    includes/common.lua). record is the task hash as flat field/value pairs (empty unless asked
    for), so a submit needs no second round trip to show the task. The recent index is trimmed to its cap by one submit in 16 (those whose task
    id ends in 0), so it may hold a few more than the cap.
]]
-- #include common
-- #include create_task
-- #include unique
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
    return {CODE.EXISTING, existing, rcall('HGET', ekey, 'status') or '', record, result, 'idem'}
  end
end
local n = #ARGV
local U = nil
if ARGV[n] ~= '' then
  local mode, window_ms, key = string.match(ARGV[n], '^([^|]*)|(%d+)|(.*)$')
  U = {key = K.unique_prefix .. key, mode = mode, window_ms = tonumber(window_ms),
       now = tonumber(now_ms), due = tonumber(ARGV[8]), retention_ms = tonumber(ARGV[5])}
  local holder = unique_holder(K, U)
  if holder then
    if U.mode == 'debounce' then unique_debounce(K, U, holder, ARGV, 14, n - 1) end
    -- The idempotency key stands for the answer this submit got: its retry gets the same one.
    if idem_key then rcall('SET', idem_key, holder, 'PX', tonumber(ARGV[6]) + math.max(0, U.due - U.now)) end
    local hkey = K.task_prefix .. holder
    local record, result = {}, ''
    if want_record then
      record = rcall('HGETALL', hkey)
      result = rcall('GET', K.result_prefix .. holder) or ''
    end
    return {CODE.EXISTING, holder, rcall('HGET', hkey, 'status') or '', record, result, 'unique'}
  end
end
local due = tonumber(ARGV[8])
local max_depth = tonumber(ARGV[7])
if due == 0 and max_depth > 0 then
  local depth = 0
  for _, p in ipairs({'high', 'normal', 'low'}) do depth = depth + rcall('XLEN', stream_key(K, queue, p)) end
  if depth >= max_depth then return {CODE.QUEUE_FULL, depth} end
end
local status, written = create_task(K, {
  task_id = task_id, queue = queue, priority = priority, now_ms = now_ms, now_iso = now_iso, due = due,
  retention_ms = ARGV[5], idem_key = idem_key, idem_ttl_ms = ARGV[6], recent_cap = ARGV[11],
  fields = ARGV, fields_from = 14, fields_to = n - 1, want_record = want_record})
if U then unique_hold(U, task_id) end
local tkey = K.task_prefix .. task_id
-- A hash that was new holds exactly what was written: no HGETALL for it.
local record = {}
if want_record then record = written or rcall('HGETALL', tkey) end
return {CODE.OK, task_id, status, record}
