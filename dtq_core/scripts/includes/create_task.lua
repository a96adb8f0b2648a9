-- Create a task's record in its partition: QUEUED in its priority stream, or PENDING in the
-- partition's schedule when it is due later. Shared by enqueueTask (a submit) and firePeriodic
-- (a schedule's tick), so a fired task is the same record as a submitted one.
-- Needs: common. The caller has made its checks (owner, idempotency, depth).
-- c: task_id, queue, priority, now_ms, now_iso, due (number, 0 = now), retention_ms,
-- idem_key (nil = none), idem_ttl_ms, recent_cap, fields (the caller's field/value pairs, none of
-- them a field this function writes), fields_from, fields_to (where they start and end in fields;
-- fields_to nil: at its end), want_record (true: return what was written). Returns the task's
-- status and, when asked for and the hash was new (every field added), the field/value pairs
-- written, which are then the whole record (nil otherwise: the caller reads it back if it needs it).
local function create_task(K, c)
  local task_id, queue, now_ms, due = c.task_id, c.queue, c.now_ms, c.due
  -- One HSET for the whole record (the stream entry's id is part of it, so XADD comes first), the
  -- caller's pairs unpacked straight into it: copying them into a table first cost a submit more
  -- Redis CPU than its PEXPIRE (issue 20). The fields every claim and completion look up come
  -- first: a small hash is a listpack, searched from its start for each field read or written.
  -- A lean record: no field at the value a reader takes for a missing one (no id, which the key
  -- holds, unless the caller passes it, as for a Django task; no cancel_requested 0, errors [],
  -- result_truncated 0; the caller leaves out an empty expires_at, idempotency_key and
  -- request_id). Each field read walks the listpack, a missing one to its end, so 7 fewer fields
  -- cut the submit's, the claim's and the completion's Redis CPU, and 128 bytes of an unfinished
  -- task's memory (docs/performance.md, "a lean task record").
  local tkey = K.task_prefix .. task_id
  local from, to = c.fields_from, c.fields_to or #c.fields
  local status, added, extra
  if due > 0 then
    status = 'PENDING'
    extra = {'status', status, 'due_at', tostring(due)}
    added = rcall('HSET', tkey, extra[1], extra[2], 'attempt', '0', extra[3], extra[4], 'created_at', now_ms,
                  'updated_at', now_ms, unpack(c.fields, from, to))
    schedule_add(K.schedule, due, task_id, queue)
  else
    status = 'QUEUED'
    local eid = rcall('XADD', stream_key(K, queue, c.priority), '*', 'task_id', task_id, 'attempt', '1')
    extra = {'status', status, 'entry_id', eid, 'enqueued_at', now_ms}
    added = rcall('HSET', tkey, extra[1], extra[2], 'attempt', '0', extra[3], extra[4], 'created_at', now_ms,
                  'updated_at', now_ms, extra[5], extra[6], unpack(c.fields, from, to))
    ring(K)
  end
  -- A delayed task's record, and its idempotency key, must outlive its wait (a delay may be longer
  -- than either lifetime): a resubmit while it waits must still find it.
  local wait = due > 0 and math.max(0, due - tonumber(now_ms)) or 0
  rcall('PEXPIRE', tkey, tonumber(c.retention_ms) + wait)
  if c.idem_key then rcall('SET', c.idem_key, task_id, 'PX', tonumber(c.idem_ttl_ms) + wait) end
  rcall('ZADD', K.recent, now_ms, task_id)
  -- Trimmed by one submit in 16, not checked by every one: task ids end in a random hex digit.
  if string.sub(task_id, -1) == '0' then rcall('ZREMRANGEBYRANK', K.recent, 0, -tonumber(c.recent_cap) - 1) end
  emit(K, 'task.queued', task_id, queue, status, 0, now_ms, c.now_iso)
  if not c.want_record or added ~= 3 + #extra / 2 + (to - from + 1) / 2 then return status, nil end
  local fields = {'attempt', '0', 'created_at', now_ms, 'updated_at', now_ms}
  for _, v in ipairs(extra) do fields[#fields + 1] = v end
  for i = from, to do fields[#fields + 1] = c.fields[i] end
  return status, fields
end
