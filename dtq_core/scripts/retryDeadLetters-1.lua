--[[
  Requeue dead letters of one partition: each task goes back to QUEUED under the same id with a
  fresh attempt budget (no expiry, and a Django task's worker list emptied), in its priority
  stream of this partition. Its stream entry and record are written before its dead letter
  leaves the DLQ, so a script failing in between (Redis does not undo a script's earlier writes)
  leaves a queued task with a stale dead letter, which a later retry or discard drops, and never
  a task in neither place.
  Entries already gone are skipped (another operator or a trim got there first); an entry whose
  task hash expired stays in the DLQ, and so does one whose entry or task record cannot be read (a
  field corrupted by hand), alone: the rest are retried.
  It adds work to the partition, so it first checks the partition's owner against the caller's
  layout: a partition whose queue was deleted (or deleted and created again) since the caller
  read the registry is refused whole, and the caller registers the queue again (see
  dtq_core/engine/dlq.py).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] owner ("queue|epoch", the caller's layout)  ARGV[2] queue  ARGV[3] consumer group
    ARGV[4] now (ms)  ARGV[5] now (ISO)  ARGV[6] retention (ms)  ARGV[7..] DLQ entry ids
  Output:
    {OK, retried, skipped (gone), kept (task expired or unreadable)}; or, changing nothing,
    {PARTITION_CLOSED, the queue the first of the entries still present names ('' if none)}
]]
-- #include common
local K = partition_keys(KEYS[1])
local layout_owner, queue, group, now_ms, now_iso, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local FIRST_ID = 7
local PRIORITY = {high = true, normal = true, low = true}

if rcall('GET', K.owner) ~= layout_owner then
  for i = FIRST_ID, #ARGV do
    local entry = rcall('XRANGE', K.dlq, ARGV[i], ARGV[i])[1]
    if entry then return {CODE.PARTITION_CLOSED, field(entry[2], 'queue') or ''} end
  end
  return {CODE.PARTITION_CLOSED, ''}
end

local function drop(entry_id)
  rcall('XDEL', K.dlq, entry_id)
  rcall('HINCRBY', K.dlq .. ':counts', queue, -1)
end

-- Returns 'retried', 'gone' or 'kept'. Everything that can fail on a corrupt record is read and
-- checked before the first write, so a failure leaves the entry where it was.
local function retry_one(entry_id)
  local entry = rcall('XRANGE', K.dlq, entry_id, entry_id)[1]
  if not entry then return 'gone' end
  local task_id, its_queue = field(entry[2], 'task_id'), field(entry[2], 'queue')
  if not task_id then error('the dead letter has no task_id', 0) end
  if its_queue ~= queue then error('the dead letter is not of the partition\'s queue', 0) end
  local tkey = K.task_prefix .. task_id
  local t = read_task(tkey, 'status', 'priority', 'dlq_entry_id', 'django_worker_ids')
  if not t.status then return 'kept' end
  if not (t.status == 'DEAD_LETTERED' and t.dlq_entry_id == entry_id) then
    drop(entry_id)  -- a stale dead letter: its task was retried (or dead-lettered again) since
    return 'gone'
  end
  if not PRIORITY[t.priority] then error('the task has no valid priority', 0) end
  local stream = K.stream_prefix .. its_queue .. ':' .. t.priority
  -- openPartition made the group; one deleted by hand since must not fail the retry.
  pcall(rcall, 'XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  local eid = rcall('XADD', stream, '*', 'task_id', task_id, 'attempt', 1)
  rcall('HSET', tkey, 'status', 'QUEUED', 'attempt', 0, 'entry_id', eid, 'enqueued_at', now_ms,
        'updated_at', now_ms, 'retried_from_dlq_at', now_ms)
  -- Removed, not written empty (a lean record, includes/create_task.lua: readers take a missing
  -- field as its default, and a dead letter's record is a hashtable, where every field costs
  -- about 50 bytes). expires_at goes: the operator asked for this run, so a passed ttl_seconds
  -- must not turn the retry into an instant EXPIRED.
  rcall('HDEL', tkey, 'dlq_entry_id', 'finished_at', 'cancel_requested', 'expires_at')
  -- A Django task's workers, one per attempt (recordDjangoAttempt): the count starts again, so
  -- does the list. Emptied, not removed: without it the reader falls back to the last worker.
  if t.django_worker_ids then
    rcall('HSET', tkey, 'django_worker_ids', '[]')
  end
  rcall('PEXPIRE', tkey, retention)
  retain_unfinish(K, task_id)
  drop(entry_id)
  ring(K)
  emit(K, 'dlq.retried', task_id, queue, 'QUEUED', 0, now_ms, now_iso)
  emit(K, 'task.queued', task_id, queue, 'QUEUED', 0, now_ms, now_iso)
  return 'retried'
end

local counts = {retried = 0, gone = 0, kept = 0}
for i = FIRST_ID, #ARGV do
  local ok, outcome = pcall(retry_one, ARGV[i])
  if not ok then outcome = 'kept' end
  counts[outcome] = counts[outcome] + 1
end
return {CODE.OK, counts.retried, counts.gone, counts.kept}
