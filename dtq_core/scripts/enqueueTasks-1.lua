--[[
  Create a batch of tasks in one partition of their queue, in order, each as enqueueTask would
  (its idempotency key, unique key and depth gate checked in turn, so a later task of the batch
  sees the earlier ones). The bulk submit (Tasks.enqueue_many) sends one call per partition
  and chunk instead of one per task: the call's own cost, the owner check and the depth gate's
  reads are paid once per call (issue 20; docs/performance.md, "a bulk submit in one call per
  partition").
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] retention (ms)  ARGV[4] idempotency ttl (ms)
    ARGV[5] most entries in this partition's streams (0 = off)
    ARGV[6] owner the caller expects ("<queue>|<epoch>": the queue comes from it)
    ARGV[7] recent cap (of this partition's index)  ARGV[8] events (1/0, as enqueueTask's)
    ARGV[9..] one block per task: task id, priority (high/normal/low), due (ms, 0 = now),
    idempotency key ('' = none), unique task ('' = none, else as enqueueTask's last ARGV), the
    number m of strings that follow, then m strings: the task hash's field/value pairs
  Output:
    one reply per task, in the batch's order, each enqueueTask's reply with no record
    ({OK, id, status, {}}, {EXISTING, id, status, {}, '', why}, {QUEUE_FULL, depth}), or the
    error a command of that task raised (the others go on); every one {PARTITION_CLOSED} when the
    owner key names another layout.
]]
-- #include common
-- #include create_task
-- #include unique
-- #include enqueue
events_on = ARGV[8] ~= '0'
local K = partition_keys(KEYS[1])
-- As enqueueTask's: a partition no layout serves takes nothing; the caller retries those tasks.
local owner = rcall('GET', K.owner)
local replies = {}
local i, n = 9, #ARGV
if owner ~= ARGV[6] then
  while i <= n do
    replies[#replies + 1] = {CODE.PARTITION_CLOSED}
    i = i + 6 + tonumber(ARGV[i + 5])
  end
  return replies
end
local queue = string.match(owner, '^(.*)|[^|]*$')  -- as the partition itself records it
local now_ms, now_iso, retention_ms, idem_ttl_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local max_depth, recent_cap = tonumber(ARGV[5]), ARGV[7]
local depth = nil
events_pending = {}  -- the batch's task.queued events: one INCRBY for their numbers (emit_flush)
while i <= n do
  local m = tonumber(ARGV[i + 5])
  -- pcall: a task whose keys make a command fail (a key of the wrong type, set by hand) gets its
  -- error as its reply, and the rest of the batch goes on, as when each task was a call of its own.
  local ok, reply, counted = pcall(enqueue_one, K, queue, ARGV[i], ARGV[i + 1], now_ms, now_iso, retention_ms,
                                   idem_ttl_ms, max_depth, tonumber(ARGV[i + 2]), ARGV[i + 3], recent_cap, false,
                                   ARGV, i + 6, i + 5 + m, ARGV[i + 4], depth)
  if ok then
    replies[#replies + 1], depth = reply, counted
  else
    replies[#replies + 1] = type(reply) == 'table' and reply.err and reply or redis.error_reply(tostring(reply))
    depth = nil  -- the failed task may have queued its entry or not: read the gate again
  end
  i = i + 6 + m
end
emit_flush(K)
return replies
