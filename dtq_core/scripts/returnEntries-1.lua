--[[
  Give back claims a worker made but never started (its backlog, dtq_core/worker/fetch.py: rows
  claimed ahead for the handler slots), at a drain or when their queue is paused: no attempt ran,
  so none is charged. Each task still RUNNING under this worker's claim (same entry, same attempt)
  goes back to QUEUED at the attempt before, with a new entry at the tail of its stream (the old
  one is acknowledged and deleted), as a reclaim does for a paused queue (includes/claim.lua); a
  task whose cancel was requested meanwhile ends CANCELLED instead. A claim that is no longer this
  worker's (reclaimed by a peer, finished, cancelled) is left alone. A queue with a rate or
  group_rate limit counted each claim as a start (includes/limits.lua): the start of a claim handed
  back is taken out of its windows again (its own member: task, attempt, entry).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] group  ARGV[2] worker id  ARGV[3] now (ms)  ARGV[4] now (ISO)
    ARGV[5] retention argument (dtq_core.config.DtqConfig.retention_arg)
    ARGV[6..] quadruples: stream (after the partition's stream key prefix: queue:priority), entry
              id, task id, attempt
  Output:
    number of tasks put back in their stream (cancelled ones not counted)
]]
-- #include common
-- #include limits
local K = partition_keys(KEYS[1])
local group, worker_id, now_ms, now_iso = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local R = retention_policy(ARGV[5])
R.defer = true
local returned = 0
local stopped = {}
local rated = nil  -- the partition's rate_n and grate_n, read at the first claim handed back
for i = 6, #ARGV, 4 do
  local stream, entry_id, task_id, attempt = K.stream_prefix .. ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local tkey = K.task_prefix .. task_id
  local t = read_task(tkey, 'status', 'attempt', 'entry_id', 'worker_id', 'queue', 'type', 'cancel_requested',
                      'group_key')
  if t.status == 'RUNNING' and t.entry_id == entry_id and t.attempt == attempt and t.worker_id == worker_id then
    stopped[#stopped + 1] = task_id
    rated = rated or rcall('HMGET', K.limits, 'rate_n', 'grate_n')
    limits_unstart(K, rated, task_id, t.group_key, attempt, entry_id)
    if t.cancel_requested == '1' then
      retain_finish(R, K, task_id, 'CANCELLED', now_ms, nil, {'status', 'CANCELLED', 'finished_at', now_ms,
                    'updated_at', now_ms})
      rcall('HINCRBY', K.stats_tasks, outcome_field(t.queue, t.type, 'CANCELLED'), 1)
      history_add(K, now_ms, t.type, 'CANCELLED')
      emit(K, 'task.cancelled', task_id, t.queue, 'CANCELLED', attempt, now_ms, now_iso)
    else
      local new_id = rcall('XADD', stream, '*', 'task_id', task_id, 'attempt', attempt)
      rcall('HSET', tkey, 'status', 'QUEUED', 'attempt', tonumber(attempt) - 1, 'entry_id', new_id,
            'updated_at', now_ms, 'enqueued_at', now_ms)
      emit(K, 'task.queued', task_id, t.queue, 'QUEUED', tonumber(attempt) - 1, now_ms, now_iso)
      returned = returned + 1
    end
    rcall('XACK', stream, group, entry_id)
    rcall('XDEL', stream, entry_id)
  end
end
if #stopped > 0 then rcall('ZREM', K.running, unpack(stopped)) end
for _, id in ipairs(stopped) do limits_left_running(K, id) end  -- flow control: slots given back
if returned > 0 then ring(K) end
retain_trim(R, K, now_ms)
return returned
