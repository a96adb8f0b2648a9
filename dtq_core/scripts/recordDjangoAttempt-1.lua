--[[
  Record which worker runs this attempt of a Django task (dtq_core.django_tasks_runner), fenced
  like completeTasks on the running attempt and its stream entry, so TaskResult.worker_ids has
  one entry per attempt and started_at stays the first start while the hash's started_at moves
  with every attempt. The entry matters: an attempt number repeats (a DLQ retry starts again at
  1, a paused queue's deferral requeues the same number), and a stale runner of an earlier entry
  must not record itself over the attempt running now.
  Input:
    KEYS[1] task hash
    ARGV[1] attempt   ARGV[2] worker id   ARGV[3] stream entry id of the attempt
  Output:
    {worker ids JSON, first started_at (ms), errors JSON, created_at (ms)}; false when the task is
    not RUNNING at that attempt under that entry (cancelled, reclaimed or retried meanwhile:
    nothing is written)
]]
local rcall = redis.call
local h = rcall('HMGET', KEYS[1], 'status', 'attempt', 'django_worker_ids', 'django_started_at', 'started_at',
                'errors', 'created_at', 'entry_id')
if h[1] ~= 'RUNNING' or h[2] ~= ARGV[1] or h[8] ~= ARGV[3] then
  return false
end
local ids = {}
if h[3] and h[3] ~= '' then
  ids = cjson.decode(h[3])
end
local attempt = tonumber(ARGV[1])
-- An attempt that died before recording itself (worker killed at once) leaves a gap.
while #ids < attempt - 1 do
  ids[#ids + 1] = 'unknown'
end
ids[attempt] = ARGV[2]
local encoded = cjson.encode(ids)
local first = h[4]
if not first or first == '' then
  first = h[5]
end
-- HSET keeps the hash's TTL: the record expires with the task.
rcall('HSET', KEYS[1], 'django_worker_ids', encoded, 'django_started_at', first)
return {encoded, first, h[6] or '', h[7] or ''}
