--[[
  Drop dead letters: each entry leaves the DLQ and its task (still DEAD_LETTERED) records when.
  Input:
    KEYS[1] DLQ stream  KEYS[2] events channel  KEYS[3] event seq
    KEYS[4] task key prefix (prefix .. task id)
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] retention (ms)  ARGV[4..] DLQ entry ids
  Output:
    number of entries discarded
]]
-- #include common
local now_ms, now_iso = ARGV[1], ARGV[2]
local discarded = 0
for i = 4, #ARGV do
  local entry = rcall('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if entry then
    -- An entry or task record corrupted by hand must not stop the rest of the discard.
    local task_id, queue = field(entry[2], 'task_id') or '', field(entry[2], 'queue') or ''
    rcall('XDEL', KEYS[1], ARGV[i])
    rcall('HINCRBY', KEYS[1] .. ':counts', queue, -1)
    local tkey = KEYS[4] .. task_id
    if redis.pcall('HGET', tkey, 'dlq_entry_id') == ARGV[i] then
      rcall('HSET', tkey, 'dlq_entry_id', '', 'dlq_discarded_at', now_ms, 'updated_at', now_ms)
      rcall('PEXPIRE', tkey, ARGV[3])
    end
    emit(KEYS[2], KEYS[3], 'dlq.discarded', task_id, queue, 'DEAD_LETTERED', field(entry[2], 'attempt'),
         now_ms, now_iso)
    discarded = discarded + 1
  end
end
return discarded
