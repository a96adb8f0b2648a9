-- Flow control (issue 22): a partition's share of its queue's concurrency and rate limits, and the
-- per-group limits of tasks that carry a group_key. Needs: common. Included by claim (so by every
-- script that claims) and by the scripts that take a task out of RUNNING.
--
-- The partition's limits hash (K.limits, written by setLimits-1) holds what this partition
-- enforces: conc (RUNNING tasks at most: the running index's size), rate_n/rate_ms (starts per
-- window: a sliding log in K.limits_rate), gconc (RUNNING tasks per group), grate_n/grate_ms
-- (starts per group and window), pause_until (ms: a handler's RateLimited(scope="queue")).
-- A queue without limits has no such hash: a fetch pays one HGETALL of a missing key, a completion
-- batch one HMGET of it.
--
-- Queue limits are checked before the streams are read, so an entry a limit holds back is never
-- delivered (it keeps its place in the stream and nothing is pending). Group limits are checked
-- per claimed task: a task whose group is full is parked in its group's wait list (its entry is
-- acknowledged but kept in the stream, so the depth gate's XLEN and the queue's waiting count still
-- see the task, at no cost to a queue without group limits; the task stays QUEUED, its attempt
-- untouched) and put back at the tail of its stream (a new entry; the kept one deleted) when a task
-- of the group gives its slot back; a task whose group is out of tokens, or paused, waits in the
-- partition's schedule (PENDING, attempt untouched) until it may start, as a delayed task does (not
-- counted by the depth gate). Either way other groups go on.
--
-- A rate window's member is "<task id>:<attempt>:<entry id>" (limits_member): each start is
-- claimed from an entry of its own, so a task that starts again at the same attempt number (after
-- RateLimited, a DLQ retry) adds a start rather than moving its earlier one, and a claim handed
-- back unstarted (returnEntries) takes out exactly the start it added (the attempt tells it from
-- a crashed attempt's, whose re-run a reclaim claims under the same entry and does not count).
--
-- A group slot is held by a task from its claim to the end of that RUNNING stint, recorded in
-- K.limits_held (task id -> group): limits_release gives it back exactly once (its HDEL decides),
-- whichever way the task leaves RUNNING. A reclaim (RUNNING -> RUNNING at the next attempt) keeps it.

-- The partition's limits (numbers), or nil when it has none.
local function limits_read(K)
  local flat = rcall('HGETALL', K.limits)
  if #flat == 0 then return nil end
  local L = {}
  for i = 1, #flat, 2 do L[flat[i]] = tonumber(flat[i + 1]) end
  return L
end

-- Starts left in a sliding window (a zset of starts scored by ms) and, when none is left, the
-- ms until the oldest start leaves the window.
local function window_room(key, n, period_ms, now)
  rcall('ZREMRANGEBYSCORE', key, '-inf', now - period_ms)
  local used = rcall('ZCARD', key)
  if used < n then return n - used, 0 end
  local oldest = rcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  local wait = oldest[2] and (tonumber(oldest[2]) + period_ms - now) or period_ms
  return 0, math.max(1, wait)
end

-- How many of `want` new claims the queue's limits allow now, and when nothing is allowed, the ms
-- until a token frees (0: wait for a slot, which a release rings).
local function limits_allowance(K, L, want, now)
  if L.pause_until and L.pause_until > now then return 0, L.pause_until - now end
  local allowed = want
  if L.conc then
    allowed = math.min(allowed, L.conc - rcall('ZCARD', K.running))
    if allowed <= 0 then return 0, 0 end
  end
  if L.rate_n and L.rate_ms then
    local room, wait = window_room(K.limits_rate, L.rate_n, L.rate_ms, now)
    if room <= 0 then return 0, wait end
    allowed = math.min(allowed, room)
  end
  return allowed, 0
end

local function limits_throttled(K, n)
  rcall('HINCRBY', K.limits, 'throttled', n)
end

-- A start's member in the rate windows: the claim's task, attempt and entry.
local function limits_member(task_id, attempt, entry_id)
  return task_id .. ':' .. attempt .. ':' .. entry_id
end

-- The queue's starts of this fetch, recorded in its rate window (members: limits_member).
local function limits_started(K, L, started, now)
  if #started == 0 or not L.rate_n then return end
  local args = {}
  for i, member in ipairs(started) do
    args[2 * i - 1], args[2 * i] = now, member
  end
  rcall('ZADD', K.limits_rate, unpack(args))
  rcall('PEXPIRE', K.limits_rate, L.rate_ms)
end

-- A claim handed back before it started (returnEntries): take the start it was counted as out of
-- the queue's and its group's rate windows again, exactly its own member. L: HMGET of the
-- partition's limits hash for rate_n, grate_n; g: the task's group_key (nil or '' for none).
local function limits_unstart(K, L, task_id, g, attempt, entry_id)
  local member = limits_member(task_id, attempt, entry_id)
  if L[1] then rcall('ZREM', K.limits_rate, member) end
  if L[2] and g and g ~= '' then rcall('ZREM', K.limits_grate_prefix .. g, member) end
end

-- A task waits in the schedule until `due` (its group is out of tokens or paused): PENDING at the
-- attempt it had, so the promotion's entry runs the same attempt number again.
local function limits_defer(K, tkey, task_id, queue, due, now)
  rcall('HSET', tkey, 'status', 'PENDING', 'due_at', due, 'entry_id', '', 'updated_at', now)
  schedule_add(K.schedule, due, task_id, queue)
end

-- Admit a task of a group to RUNNING, or hold it back: nil when it may start (its group slot is
-- taken here), else the reason ('parked' or 'deferred'). The caller settled nothing yet; when held
-- back, the caller settles the entry ('parked': acknowledges it only, the wait list keeps it).
-- t: the task's fields (group_key, queue); ea: the attempt it would run; entry_id: the entry
-- claimed.
local function limits_admit(K, L, tkey, task_id, t, ea, entry_id, now)
  local g = t.group_key
  if not g or g == '' or not (L.gconc or L.grate_n or L.gpaused) then return nil end
  if L.gpaused then
    local untl = tonumber(rcall('HGET', K.limits_gpause, g) or '')
    if untl and untl > now then
      limits_defer(K, tkey, task_id, t.queue, untl, now)
      return 'deferred'
    end
  end
  if L.gconc then
    local running = tonumber(rcall('HGET', K.limits_groups, g) or '0')
    if running >= L.gconc then
      -- The list holds task ids, as it did before entries were kept (a worker of that version,
      -- during a rolling deploy, still puts these tasks back); the task's entry_id names the kept
      -- entry, for its unpark, a cancel and a purge.
      rcall('RPUSH', K.limits_wait_prefix .. g, task_id)
      rcall('HSET', K.limits_waiting, g, '1')
      rcall('HSET', tkey, 'entry_id', entry_id, 'updated_at', now)
      return 'parked'
    end
  end
  if L.grate_n and L.grate_ms then
    local key = K.limits_grate_prefix .. g
    local room, wait = window_room(key, L.grate_n, L.grate_ms, now)
    if room <= 0 then
      limits_defer(K, tkey, task_id, t.queue, now + wait, now)
      return 'deferred'
    end
    rcall('ZADD', key, now, limits_member(task_id, ea, entry_id))
    rcall('PEXPIRE', key, L.grate_ms)
  end
  if L.gconc then
    rcall('HINCRBY', K.limits_groups, g, 1)
    rcall('HSET', K.limits_held, task_id, g)
  end
  return nil
end

-- Put up to n parked tasks of group g back at the tail of their streams (those cancelled
-- meanwhile are dropped from the list), ringing the partition. Returns how many went back.
local function limits_unpark(K, g, n)
  local wkey, back = K.limits_wait_prefix .. g, 0
  while n > 0 do
    local id = rcall('LPOP', wkey)
    if not id then break end
    local tkey = K.task_prefix .. id
    local t = read_task(tkey, 'status', 'attempt', 'queue', 'priority', 'entry_id')
    if t.status == 'QUEUED' and t.queue then
      local stream = stream_key(K, t.queue, t.priority or 'normal')
      local eid = rcall('XADD', stream, '*', 'task_id', id, 'attempt', tonumber(t.attempt) + 1)
      rcall('HSET', tkey, 'entry_id', eid)
      -- The entry its park kept goes, so the stream holds the task once ('' when an older
      -- version parked it: that one kept none).
      if t.entry_id and t.entry_id ~= '' then rcall('XDEL', stream, t.entry_id) end
      back, n = back + 1, n - 1
    end
  end
  if rcall('EXISTS', wkey) == 0 then rcall('HDEL', K.limits_waiting, g) end
  if back > 0 then ring(K) end
  return back
end

-- Every parked task back in its stream (the limits changed: each is judged again at its claim).
local function limits_unpark_all(K)
  for _, g in ipairs(rcall('HKEYS', K.limits_waiting)) do limits_unpark(K, g, 1e9) end
end

-- The task left RUNNING (any way): give its group slot back, once, and let the next parked task
-- of its group go.
local function limits_release(K, task_id)
  local g = rcall('HGET', K.limits_held, task_id)
  if not g then return end
  rcall('HDEL', K.limits_held, task_id)
  if rcall('HINCRBY', K.limits_groups, g, -1) <= 0 then rcall('HDEL', K.limits_groups, g) end
  limits_unpark(K, g, 1)
end

-- Tasks left RUNNING in this script: when the queue has a concurrency limit, a freed slot rings
-- the partition (a fetch that found it full cleared its ready flag). Once per script call (the
-- mark is on the call's K, not a variable of the script: a Redis function's persist across calls).
local function limits_freed(K)
  if rawget(K, 'limits_rung') then return end
  K.limits_rung = true
  if rcall('HEXISTS', K.limits, 'conc') == 1 then ring(K) end
end

-- Release for scripts off the hot path: the group slot and the ring, per task.
local function limits_left_running(K, task_id)
  limits_release(K, task_id)
  limits_freed(K)
end

-- A handler raised RateLimited: pause its queue's partition (scope 'queue'; the worker then pauses
-- the queue's other partitions, pauseLimits-1) or its group (scope 'group', when the task has a
-- group_key) until `due`; a later pause never shortens one in force.
local function limits_pause(K, tkey, scope, due)
  if scope == 'group' then
    local g = rcall('HGET', tkey, 'group_key')
    if not g or g == '' then return end
    local cur = tonumber(rcall('HGET', K.limits_gpause, g) or '0') or 0
    if due > cur then rcall('HSET', K.limits_gpause, g, due) end
    rcall('HSET', K.limits, 'gpaused', '1')
    return
  end
  local cur = tonumber(rcall('HGET', K.limits, 'pause_until') or '0') or 0
  if due > cur then rcall('HSET', K.limits, 'pause_until', due) end
end
