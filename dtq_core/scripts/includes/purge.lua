-- A purge's cancel of one waiting task (never delivered, or parked by a full group), shared by
-- purgeQueue (stream entries) and purgeParked (group wait lists, kept entries). Needs: common.
-- t: read_task(..., 'status', 'queue', 'attempt', 'type'); counts: queue|type|CANCELLED -> n, for
-- one HINCRBY per field at the end of the caller (dtq_tasks_total). The task history counts it
-- cancelled as a cancel does; the caller sets history_batched and ends with history_flush.
local function purge_task(R, K, task_id, t, counts, now_ms, now_iso)
  retain_finish(R, K, task_id, 'CANCELLED', now_ms, nil, {'status', 'CANCELLED', 'cancel_requested', '1',
                'finished_at', now_ms, 'updated_at', now_ms, 'last_error', 'purged'})
  local counted = outcome_field(t.queue, t.type, 'CANCELLED')
  counts[counted] = (counts[counted] or 0) + 1
  history_add(K, now_ms, t.type, 'CANCELLED')
  emit(K, 'task.cancelled', task_id, t.queue, 'CANCELLED', t.attempt, now_ms, now_iso)
end

-- A purge's step for one stream entry: the task it stands for is cancelled when it still waits
-- under that very entry (not delivered since, nor put back under another), and the entry goes.
-- Returns 1 when it cancelled.
local function purge_entry(R, K, stream, entry, counts, now_ms, now_iso)
  local task_id = field(entry[2], 'task_id') or ''
  local t = read_task(K.task_prefix .. task_id, 'status', 'queue', 'attempt', 'entry_id', 'type')
  local cancelled = 0
  if t.status == 'QUEUED' and t.entry_id == entry[1] then
    purge_task(R, K, task_id, t, counts, now_ms, now_iso)
    cancelled = 1
  end
  rcall('XDEL', stream, entry[1])
  return cancelled
end
