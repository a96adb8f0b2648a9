--[[
  Delete one partition of an empty queue, in the steps a queue-wide delete takes (each one call
  per partition, pipelined), so that either every partition goes or none does:
  close  - refuse unless the partition is empty, else close it: its owner becomes the tombstone
           "deleted|<queue>|<epoch>", so from now on every script that adds work to it (a
           submitter holding the queue's layout, a DLQ retry, the leader) is refused.
           Empty: nothing waiting or delivered and not yet acknowledged in its streams, no
           RUNNING task in its running index (one whose entry vanished; the leader's sweep would
           queue it again), no task parked in a group's wait list (flow control), nothing in its
           schedule or in the scheduler's claims (taken from
           the schedule and about to be queued), no dead letter (a dead letter of a deleted
           queue could be neither listed nor retried), no workflow outbox entry (a step that
           ended and whose workflow is not advanced yet: the leader re-drives only the
           partitions of live queues, so the workflow would wait forever; counted in flight).
  reopen - undo a close (another partition was not empty): the owner names the queue again.
  drop   - after every partition closed: delete the partition's keys (streams and their group,
           flags, schedule, indexes, DLQ, the flow-control limits and their state; per-group rate
           windows expire on their own), leaving the tombstone for ARGV[4] seconds. Its statistics
           are taken out (includes/stats.lua) and returned: only the caller whose drop took them
           adds them to the global ones, so two deletes of one queue at once count its tasks once.
           Task records, results and idempotency keys expire on their own TTLs (a task stays
           readable by id meanwhile).
  A partition a delete closed and never dropped (the process died) stays closed: running the
  delete again finishes it.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] close | reopen | drop  ARGV[2] owner ("queue|epoch", the caller's layout)
    ARGV[3] queue  ARGV[4] group (close) or tombstone TTL in seconds (drop)
  Output:
    close:  {OK}; {QUEUE_NOT_EMPTY, waiting, in flight, scheduled, dead letters};
            {PARTITION_CLOSED} (owned by another layout: the caller's is stale)
    reopen: {OK, 1 reopened or 0 it was not closed by this layout's delete}
    drop:   {OK, tasks, duration, counters} (the statistics it held, as flat HGETALL replies:
            empty when another drop took them); {PARTITION_CLOSED} (not closed by this layout's delete)
    (codes: CODE in includes/common.lua)
]]
-- #include common
-- #include stats
local K = partition_keys(KEYS[1])
local step, mine, queue = ARGV[1], ARGV[2], ARGV[3]
local tombstone = 'deleted|' .. mine
local current = rcall('GET', K.owner)
local streams = {}
for i, priority in ipairs({'high', 'normal', 'low'}) do streams[i] = stream_key(K, queue, priority) end

if step == 'reopen' then
  if current ~= tombstone then return {CODE.OK, 0} end
  rcall('SET', K.owner, mine)
  return {CODE.OK, 1}
end

if step == 'drop' then
  if current ~= tombstone then return {CODE.PARTITION_CLOSED} end
  local stats = take_stats(K)
  rcall('DEL', streams[1], streams[2], streams[3], K.ready, K.wake_list, K.paused, K.schedule, K.schedule_claims,
        K.schedule .. ':counts', K.running, K.recent, K.dlq, K.dlq .. ':counts', K.event_seq,
        K.retain_ok, K.retain_failed,
        K.limits, K.limits_rate, K.limits_held, K.limits_groups, K.limits_waiting, K.limits_gpause)
  -- The partition's history (includes/history.lua): every minute, hour and day hash it may still
  -- hold (minutes live 25 h, hours and days 31 days).
  local now = tonumber((server_now()))
  local minute, hour, day = math.floor(now / 60000), math.floor(now / 3600000), math.floor(now / 86400000)
  local old = {K.hist_types}
  for m = minute - 1500, minute + 5 do old[#old + 1] = K.hist .. 'm:' .. m end
  for h = hour - 24 * 31, hour + 1 do old[#old + 1] = K.hist .. 'h:' .. h end
  for d = day - 32, day + 1 do old[#old + 1] = K.hist .. 'd:' .. d end
  for i = 1, #old, 500 do rcall('UNLINK', unpack(old, i, math.min(i + 499, #old))) end
  rcall('SET', K.owner, tombstone, 'EX', tonumber(ARGV[4]))
  return {CODE.OK, unpack(stats)}
end

-- close (again, after a delete cut short: the partition is still checked). No owner at all (its
-- tombstone expired, or the partition was never opened): nothing can add work to it either.
if current and current ~= mine and current ~= tombstone then return {CODE.PARTITION_CLOSED} end
local entries, pending = 0, 0
for _, stream in ipairs(streams) do
  if rcall('EXISTS', stream) == 1 then
    entries = entries + rcall('XLEN', stream)
    local summary = redis.pcall('XPENDING', stream, ARGV[4])
    if type(summary) == 'table' and not summary.err then pending = pending + tonumber(summary[1]) end
  end
end
local in_flight = math.max(pending, rcall('ZCARD', K.running)) + rcall('HLEN', K.wf_outbox)
-- Tasks parked while their group was full (includes/limits.lua) keep their entries in the streams,
-- counted above; a wait list that still names one keeps the partition from being empty too (a task
-- parked by an older dtq has no entry there).
local parked = 0
for _, g in ipairs(rcall('HKEYS', K.limits_waiting)) do parked = parked + rcall('LLEN', K.limits_wait_prefix .. g) end
local scheduled = rcall('ZCARD', K.schedule) + rcall('ZCARD', K.schedule_claims)
local dead = rcall('XLEN', K.dlq)
if entries > 0 or parked > 0 or in_flight > 0 or scheduled > 0 or dead > 0 then
  return {CODE.QUEUE_NOT_EMPTY, math.max(0, entries - pending, parked), in_flight, scheduled, dead}
end
rcall('SET', K.owner, tombstone)
return {CODE.OK}
