--[[
  Create a task in one partition of its queue, atomically with its idempotency key and the depth
  gate: QUEUED in its priority stream, or PENDING in the partition's schedule when it is delayed
  (delayed tasks bypass the depth gate). The queue's registration and the bound on queues
  (DTQ_MAX_QUEUES) are registerQueue-1's; this script only checks that the partition still
  belongs to the layout the caller read (the queue may have been deleted since).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] task id  ARGV[2] priority (high/normal/low)  ARGV[3] now (ms)  ARGV[4] now (ISO)
    ARGV[5] retention (ms)  ARGV[6] idempotency ttl (ms)
    ARGV[7] most entries in this partition's streams (0 = off)  ARGV[8] due (ms, 0 = now)
    ARGV[9] owner the caller expects ("<queue>|<epoch>": the queue comes from it)
    ARGV[10] idempotency key ('' = none)  ARGV[11] recent cap (of this partition's index)
    ARGV[12] return the record (1/0)  ARGV[13] events (1/0: publish task.queued, see events_on
    in common.lua)  ARGV[14..#ARGV-1] task hash field/value pairs
    ARGV[#ARGV] (issue 22, appended after the pairs) unique task: '' = none, else
    "<mode>|<window ms>|<key>" (mode while_active/throttle/debounce; window 0: while_active's
    default cap, the retention; the key last, as it may hold a |)
  Output:
    {OK, id, status, record} created; {EXISTING, existing id, its status, record, result, why}
    idempotency key seen (why 'idem') or unique key held (why 'unique': for debounce, the
    waiting task now carries this submit's payload and due time); {QUEUE_FULL, depth of this
    partition}; {PARTITION_CLOSED} the owner key names another layout (codes: CODE in
    includes/common.lua). record is the task hash as flat field/value pairs (empty unless asked
    for), so a submit needs no second round trip to show the task. The recent index is trimmed to its cap by one submit in 16 (those whose task
    id ends in 0), so it may hold a few more than the cap.
]]
-- #include common
-- #include create_task
-- #include unique
-- #include enqueue
events_on = ARGV[13] ~= '0'
local K = partition_keys(KEYS[1])
-- Deleted (or deleted and created again) since the caller read the registry: nothing may land
-- in a partition no layout serves. The caller reads the registry again and retries.
local owner = rcall('GET', K.owner)
if owner ~= ARGV[9] then return {CODE.PARTITION_CLOSED} end
local n = #ARGV
-- The partition's queue, as the partition itself records it (owner).
return (enqueue_one(K, string.match(owner, '^(.*)|[^|]*$'), ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
                    tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[10], ARGV[11], ARGV[12] == '1', ARGV, 14, n - 1, ARGV[n]))
