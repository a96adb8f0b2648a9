--[[
  Record which worker runs this attempt of a Django task (dtq_core.django_tasks.runner), fenced
  like completeTasks on the running attempt and its stream entry, so TaskResult.worker_ids has
  one entry per attempt (cut to this attempt: entries past it are a run before a DLQ retry) and
  started_at stays the first start while the hash's started_at moves with every attempt. The
  entry matters: an attempt number repeats (a DLQ retry starts again at 1, a paused queue's
  deferral requeues the same number), and a stale runner of an earlier entry must not record
  itself over the attempt running now.
  Input:
    KEYS[1] partition key prefix of the task (its id names the partition: dtq_core.keys.tag_of)
    ARGV[1] task id   ARGV[2] attempt   ARGV[3] worker id   ARGV[4] stream entry id of the attempt
  Output:
    {worker ids JSON, first started_at (ms), errors JSON, created_at (ms)}; false when the task is
    not RUNNING at that attempt under that entry (cancelled, reclaimed or retried meanwhile:
    nothing is written)
]]
-- #include common
local K = partition_keys(KEYS[1])
local tkey = K.task_prefix .. ARGV[1]
local t = read_task(tkey, 'status', 'attempt', 'django_worker_ids', 'django_started_at', 'started_at',
                    'errors', 'created_at', 'entry_id')
if t.status ~= 'RUNNING' or t.attempt ~= ARGV[2] or t.entry_id ~= ARGV[4] then
  return false
end
local attempt = tonumber(ARGV[2])
-- The earlier attempts' entries only: entries from this attempt on are a previous run's, whose
-- count dtq restarted (a DLQ retry starts again at 1), so the list is one entry per attempt of
-- this run and TaskResult.attempts is dtq's attempt number.
local ids = {}
if t.django_worker_ids and t.django_worker_ids ~= '' then
  local recorded = cjson.decode(t.django_worker_ids)
  for i = 1, math.min(#recorded, attempt - 1) do
    ids[i] = recorded[i]
  end
end
-- An attempt that died before recording itself (worker killed at once) leaves a gap.
while #ids < attempt - 1 do
  ids[#ids + 1] = 'unknown'
end
ids[attempt] = ARGV[3]
local encoded = cjson.encode(ids)
local first = t.django_started_at
if not first or first == '' then
  first = t.started_at
end
-- HSET keeps the hash's TTL: the record expires with the task.
rcall('HSET', tkey, 'django_worker_ids', encoded, 'django_started_at', first)
return {encoded, first, t.errors or '', t.created_at or ''}
