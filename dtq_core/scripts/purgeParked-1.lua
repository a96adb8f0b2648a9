--[[
  Cancel up to LIMIT tasks parked in one partition's group wait lists (includes/limits.lua: a task
  whose group was full when it was claimed waits there, QUEUED, its entry acknowledged but kept in
  its stream for the depth gate and the waiting count), deleting the entries they kept, so that a
  queue purge cancels them as it cancels the entries of its streams (whose purge reads only the
  entries never delivered). A queue-wide purge calls this per partition (pipelined) until each
  returns 0 left.
  The call that empties the lists then looks at the oldest LIMIT entries of each stream's
  delivered part that are not in flight (not pending): with the lists empty, none is a parked
  task's any more. Each is deleted, and a task still QUEUED under it (its wait list lost it, as a
  purge of an older version did) is cancelled like a parked one; the others were left behind by a
  worker of an older version that put a parked task back during a rolling deploy (it knew nothing
  of kept entries), or by a task whose record expired while it was parked.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] limit
    ARGV[4] retention (includes/retain.lua: retention_policy)
    ARGV[5] queue  ARGV[6] consumer group
  Output:
    {cancelled, 1 when parked tasks may be left, else 0}
]]
-- #include common
-- #include purge
local K = partition_keys(KEYS[1])
history_batched = true  -- one write of the history for the whole call (purge_task)
local now_ms, now_iso, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local queue, group = ARGV[5], ARGV[6]
local R = retention_policy(ARGV[4])
R.defer = true  -- one count trim for the whole call
local cancelled, seen = 0, 0
local counts = {}  -- per queue|type|cancelled field, for dtq_tasks_total (one HINCRBY each)
for _, g in ipairs(rcall('HKEYS', K.limits_waiting)) do
  local wkey = K.limits_wait_prefix .. g
  while seen < limit do
    local task_id = rcall('LPOP', wkey)
    if not task_id then break end
    seen = seen + 1
    local t = read_task(K.task_prefix .. task_id, 'status', 'queue', 'attempt', 'entry_id', 'type', 'priority')
    -- Parked: QUEUED (a task in the list that was put back has left it); anything else in the list
    -- was cancelled or finished meanwhile.
    if t.status == 'QUEUED' then
      purge_task(R, K, task_id, t, counts, now_ms, now_iso)
      cancelled = cancelled + 1
      -- The entry its park kept ('' when an older version parked it: that one kept none).
      if t.entry_id and t.entry_id ~= '' and t.queue then
        rcall('XDEL', stream_key(K, t.queue, t.priority or 'normal'), t.entry_id)
      end
    end
  end
  if rcall('EXISTS', wkey) == 0 then rcall('HDEL', K.limits_waiting, g) end
  if seen >= limit then break end
end

-- Kept entries left behind (see the header), in the part of the stream the group has read.
local function sweep(stream)
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if type(groups) ~= 'table' or groups.err then return end  -- no stream, or no group yet
  local last = nil
  for _, g in ipairs(groups) do
    if field(g, 'name') == group then last = field(g, 'last-delivered-id') end
  end
  if not last then return end
  local entries = rcall('XRANGE', stream, '-', last, 'COUNT', limit)
  if #entries == 0 then return end
  local pending = {}
  for _, p in ipairs(rcall('XPENDING', stream, group, entries[1][1], entries[#entries][1], #entries)) do
    pending[p[1]] = true
  end
  for _, entry in ipairs(entries) do
    if not pending[entry[1]] then
      cancelled = cancelled + purge_entry(R, K, stream, entry, counts, now_ms, now_iso)
    end
  end
end

if seen < limit then
  for _, priority in ipairs({'high', 'normal', 'low'}) do sweep(stream_key(K, queue, priority)) end
end
retain_trim(R, K, now_ms)
for counted, n in pairs(counts) do rcall('HINCRBY', K.stats_tasks, counted, n) end
history_flush(K, now_ms)
return {cancelled, seen >= limit and 1 or 0}
