--[[
  Delete an empty queue: its streams (and their consumer group), its wake list, its paused flag
  and its place in the known and ready sets, at once. Refused while anything of it waits, runs
  or is scheduled: entries in its streams (waiting, or delivered and not yet acknowledged), a
  retry or delayed task in the schedule or in the scheduler's claims (taken from the schedule and
  about to be queued; a leader that died between the two holds them until the stale-claim
  reaper returns them), or a RUNNING task of it in the running index (one whose entry vanished;
  the leader's sweep would queue it again). Its dead letters stay in the DLQ
  (retrying one brings the queue back), and its counters stay in the metrics.
  Input:
    KEYS[1] known queues  KEYS[2] paused set  KEYS[3] who paused each queue  KEYS[4] ready set
    KEYS[5..7] the queue's high/normal/low streams  KEYS[8] the queue's wake list
    KEYS[9] schedule counts per queue  KEYS[10] running index  KEYS[11] events channel
    KEYS[12] event seq  KEYS[13] task key prefix (prefix .. task id)  KEYS[14] schedule claims
    ARGV[1] queue  ARGV[2] group  ARGV[3] now (ms)  ARGV[4] now (ISO)
  Output:
    {OK} deleted; {QUEUE_NOT_FOUND} unknown queue; {QUEUE_NOT_EMPTY, waiting, in flight, scheduled}
    not empty (codes: CODE in includes/common.lua)
]]
-- #include common
local queue = ARGV[1]
if rcall('SISMEMBER', KEYS[1], queue) == 0 then return {CODE.QUEUE_NOT_FOUND} end
local entries, pending = 0, 0
for k = 5, 7 do
  if rcall('EXISTS', KEYS[k]) == 1 then
    entries = entries + rcall('XLEN', KEYS[k])
    local summary = redis.pcall('XPENDING', KEYS[k], ARGV[2])
    if type(summary) == 'table' and not summary.err then pending = pending + tonumber(summary[1]) end
  end
end
local running = 0
for _, task_id in ipairs(rcall('ZRANGE', KEYS[10], 0, -1)) do
  if rcall('HGET', KEYS[13] .. task_id, 'queue') == queue then running = running + 1 end
end
local in_flight = math.max(pending, running)
local scheduled = tonumber(rcall('HGET', KEYS[9], queue) or '0')
-- Claims are few (a promotion in progress, or a dead leader's until they are returned), and the
-- per-queue schedule count no longer includes them.
for _, task_id in ipairs(rcall('ZRANGE', KEYS[14], 0, -1)) do
  if rcall('HGET', KEYS[13] .. task_id, 'queue') == queue then scheduled = scheduled + 1 end
end
if entries > 0 or in_flight > 0 or scheduled > 0 then
  return {CODE.QUEUE_NOT_EMPTY, math.max(0, entries - pending), in_flight, scheduled}
end
rcall('DEL', KEYS[5], KEYS[6], KEYS[7], KEYS[8])
rcall('SREM', KEYS[1], queue)
rcall('SREM', KEYS[2], queue)
rcall('HDEL', KEYS[3], queue)
rcall('SREM', KEYS[4], queue)
rcall('HDEL', KEYS[9], queue)
emit(KEYS[11], KEYS[12], 'queue.deleted', nil, queue, nil, 0, ARGV[3], ARGV[4])
return {CODE.OK}
