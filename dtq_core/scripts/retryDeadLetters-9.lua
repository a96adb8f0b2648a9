--[[
  Requeue dead letters: each entry leaves the DLQ and its task goes back to QUEUED under the
  same id with a fresh attempt budget (and no expiry). Entries already gone are skipped (another operator or
  a trim got there first); an entry whose task hash expired stays in the DLQ, and so does one whose
  entry or task record cannot be read (a field corrupted by hand), alone: the rest are retried.
  Input:
    KEYS[1] DLQ stream  KEYS[2] events channel  KEYS[3] event seq  KEYS[4] known queues
    KEYS[5] ready queues set  KEYS[6] shared wake list  KEYS[7] task key prefix (prefix .. task id)
    KEYS[8] stream key prefix (prefix .. queue .. ':' .. priority)  KEYS[9] wake key prefix (prefix .. queue)
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] retention (ms)  ARGV[4] group  ARGV[5..] DLQ entry ids
  Output:
    {retried, skipped (gone), kept (task expired or unreadable)}
]]
-- #include common
local now_ms, now_iso = ARGV[1], ARGV[2]

-- Returns 'retried', 'gone' or 'kept'. Everything that can fail on a corrupt record is read and
-- checked before the first write, so a failure leaves the entry where it was.
local function retry_one(entry_id)
  local entry = rcall('XRANGE', KEYS[1], entry_id, entry_id)[1]
  if not entry then return 'gone' end
  local task_id, queue = field(entry[2], 'task_id'), field(entry[2], 'queue')
  if not task_id or not queue then error('the dead letter has no task_id or queue', 0) end
  local tkey = KEYS[7] .. task_id
  local t = read_task(tkey, 'status', 'priority', 'dlq_entry_id')
  if not t.status then return 'kept' end
  local current = t.status == 'DEAD_LETTERED' and t.dlq_entry_id == entry_id
  if current and not t.priority then error('the task has no priority', 0) end
  rcall('XDEL', KEYS[1], entry_id)
  rcall('HINCRBY', KEYS[1] .. ':counts', queue, -1)
  if not current then return 'gone' end
  local stream = KEYS[8] .. queue .. ':' .. t.priority
  -- The queue may have been deleted since the task failed: retrying brings it back.
  if rcall('SADD', KEYS[4], queue) == 1 then
    for _, p in ipairs({'high', 'normal', 'low'}) do
      pcall(rcall, 'XGROUP', 'CREATE', KEYS[8] .. queue .. ':' .. p, ARGV[4], '0', 'MKSTREAM')
    end
  end
  pcall(rcall, 'XGROUP', 'CREATE', stream, ARGV[4], '0', 'MKSTREAM')
  local eid = rcall('XADD', stream, '*', 'task_id', task_id, 'attempt', 1)
  ring(KEYS[9] .. queue, KEYS[5], KEYS[6], queue)
  rcall('HSET', tkey, 'status', 'QUEUED', 'attempt', 0, 'entry_id', eid, 'dlq_entry_id', '',
        'enqueued_at', now_ms, 'updated_at', now_ms, 'finished_at', '', 'cancel_requested', '0',
        'retried_from_dlq_at', now_ms, 'expires_at', '')
  -- expires_at is cleared: the operator asked for this run, so a passed ttl_seconds must
  -- not turn the retry into an instant EXPIRED.
  rcall('PEXPIRE', tkey, ARGV[3])
  emit(KEYS[2], KEYS[3], 'dlq.retried', task_id, queue, 'QUEUED', 0, now_ms, now_iso)
  emit(KEYS[2], KEYS[3], 'task.queued', task_id, queue, 'QUEUED', 0, now_ms, now_iso)
  return 'retried'
end

local counts = {retried = 0, gone = 0, kept = 0}
for i = 5, #ARGV do
  local ok, outcome = pcall(retry_one, ARGV[i])
  if not ok then outcome = 'kept' end
  counts[outcome] = counts[outcome] + 1
end
return {counts.retried, counts.gone, counts.kept}
