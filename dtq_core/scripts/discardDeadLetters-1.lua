--[[
  Drop dead letters of one partition: each entry leaves the DLQ and its task (still
  DEAD_LETTERED) records when. Adds no work, so it needs no owner check: a deleted queue's dead
  letters can be discarded.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] retention (ms)  ARGV[4..] DLQ entry ids
  Output:
    number of entries discarded
]]
-- #include common
local K = partition_keys(KEYS[1])
local now_ms, now_iso, retention = ARGV[1], ARGV[2], ARGV[3]
local discarded = 0
for i = 4, #ARGV do
  local entry_id = ARGV[i]
  local entry = rcall('XRANGE', K.dlq, entry_id, entry_id)[1]
  if entry then
    -- An entry or task record corrupted by hand must not stop the rest of the discard.
    local task_id, queue = field(entry[2], 'task_id') or '', field(entry[2], 'queue') or ''
    rcall('XDEL', K.dlq, entry_id)
    rcall('HINCRBY', K.dlq .. ':counts', queue, -1)
    local tkey = K.task_prefix .. task_id
    if redis.pcall('HGET', tkey, 'dlq_entry_id') == entry_id then
      rcall('HSET', tkey, 'dlq_entry_id', '', 'dlq_discarded_at', now_ms, 'updated_at', now_ms)
      rcall('PEXPIRE', tkey, retention)
    end
    emit(K, 'dlq.discarded', task_id, queue, 'DEAD_LETTERED', field(entry[2], 'attempt'), now_ms, now_iso)
    discarded = discarded + 1
  end
end
return discarded
