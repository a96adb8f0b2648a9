--[[
  Cancel up to LIMIT tasks parked in one partition's group wait lists (includes/limits.lua: a task
  whose group was full when it was claimed waits there, QUEUED, with no stream entry), so that a
  queue purge cancels them as it cancels the entries of its streams. A queue-wide purge calls this
  per partition (pipelined) until each returns 0 left.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] limit
    ARGV[4] retention (includes/retain.lua: retention_policy)
  Output:
    {cancelled, 1 when parked tasks may be left, else 0}
]]
-- #include common
-- #include purge
local K = partition_keys(KEYS[1])
local now_ms, now_iso, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
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
    local t = read_task(K.task_prefix .. task_id, 'status', 'queue', 'attempt', 'entry_id', 'type')
    -- Parked: QUEUED with no entry (a task put back in its stream has one, and the stream's purge
    -- sees it); anything else in the list was cancelled or finished meanwhile.
    if t.status == 'QUEUED' and (t.entry_id or '') == '' then
      purge_task(R, K, task_id, t, counts, now_ms, now_iso)
      cancelled = cancelled + 1
    end
  end
  if rcall('EXISTS', wkey) == 0 then rcall('HDEL', K.limits_waiting, g) end
  if seen >= limit then break end
end
retain_trim(R, K, now_ms)
for counted, n in pairs(counts) do rcall('HINCRBY', K.stats_tasks, counted, n) end
return {cancelled, seen >= limit and 1 or 0}
