--[[
  Requeue dead letters: each entry leaves the DLQ and its task goes back to QUEUED under the
  same id with a fresh attempt budget (and no expiry). Entries already gone are skipped (another operator or
  a trim got there first); an entry whose task hash expired stays in the DLQ.
  Input:
    KEYS[1] DLQ stream  KEYS[2] events channel  KEYS[3] event seq
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] retention (ms)  ARGV[4] task key prefix
    ARGV[5] stream key prefix  ARGV[6] group  ARGV[7] wake key prefix  ARGV[8..] DLQ entry ids
  Output:
    {retried, skipped (gone), kept (task expired)}
]]
-- #include common
local now_ms, now_iso = ARGV[1], ARGV[2]
local retried, gone, kept = 0, 0, 0
for i = 8, #ARGV do
  local entry = rcall('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if not entry then
    gone = gone + 1
  else
    local task_id, queue = field(entry[2], 'task_id'), field(entry[2], 'queue')
    local tkey = ARGV[4] .. task_id
    local h = rcall('HMGET', tkey, 'status', 'priority', 'dlq_entry_id')
    if not h[1] then
      kept = kept + 1
    else
      rcall('XDEL', KEYS[1], ARGV[i])
      rcall('HINCRBY', KEYS[1] .. ':counts', queue, -1)
      if h[1] == 'DEAD_LETTERED' and h[3] == ARGV[i] then
        local stream = ARGV[5] .. queue .. ':' .. h[2]
        pcall(rcall, 'XGROUP', 'CREATE', stream, ARGV[6], '0', 'MKSTREAM')
        local eid = rcall('XADD', stream, '*', 'task_id', task_id, 'attempt', 1)
        ring(ARGV[7] .. queue)
        rcall('HSET', tkey, 'status', 'QUEUED', 'attempt', 0, 'entry_id', eid, 'dlq_entry_id', '',
              'enqueued_at', now_ms, 'updated_at', now_ms, 'finished_at', '', 'cancel_requested', '0',
              'retried_from_dlq_at', now_ms, 'expires_at', '')
        -- expires_at is cleared: the operator asked for this run, so a passed ttl_seconds must
        -- not turn the retry into an instant EXPIRED.
        rcall('PEXPIRE', tkey, ARGV[3])
        emit(KEYS[2], KEYS[3], 'dlq.retried', task_id, queue, 'QUEUED', 0, now_ms, now_iso)
        emit(KEYS[2], KEYS[3], 'task.queued', task_id, queue, 'QUEUED', 0, now_ms, now_iso)
        retried = retried + 1
      else
        gone = gone + 1
      end
    end
  end
end
return {retried, gone, kept}
