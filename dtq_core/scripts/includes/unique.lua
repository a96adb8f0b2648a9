-- Unique tasks (issue 22; docs/tasks.md "Unique tasks"), for enqueueTask. Needs: common.
-- U: key (the unique key's Redis key), mode (while_active/throttle/debounce), window_ms (0: none
-- given), now (ms, the caller's clock), due (ms, 0 = now), retention_ms.
-- The key holds "<task id>|<until ms>". Its holder's record is read lazily at the next submit, so
-- no script that ends a task (completion, cancel, expiry, the DLQ, retention) has to release it,
-- and a key whose task vanished (expired record, deleted queue) is free again by itself.

local function ms_text(ms) return string.format('%.0f', ms) end

-- The task holding U.key for this submit's mode, or nil when a new task may take it.
local function unique_holder(K, U)
  local held = rcall('GET', U.key)
  if not held then return nil end
  local holder, until_ms = string.match(held, '^(.+)|(%d+)$')
  if not holder then return nil end  -- not a value dtq wrote: taken over by the new task
  if U.mode == 'throttle' then
    if tonumber(until_ms) > U.now then return holder end
    return nil
  end
  if U.mode == 'debounce' then
    -- Only while it still waits in the schedule and has never started: one that ran and is back
    -- in the schedule (RateLimited puts it there, PENDING) has started, and its wait is the one
    -- the downstream service asked for (the claim writes started_at: one HMGET, not an HGET more).
    local status, started = unpack(rcall('HMGET', K.task_prefix .. holder, 'status', 'started_at'))
    if status == 'PENDING' and not started and rcall('ZSCORE', K.schedule, holder) then return holder end
    return nil
  end
  local status = rcall('HGET', K.task_prefix .. holder, 'status')
  -- while_active: until the task finishes, its record is gone, or the cap has passed.
  if status and not TERMINAL[status] and tonumber(until_ms) > U.now then return holder end
  return nil
end

-- debounce: the waiting holder takes this submit's payload (and expiry and request id), and its
-- start moves to this submit's due time. fields[from..to]: the submit's field/value pairs.
local function unique_debounce(K, U, holder, fields, from, to)
  local tkey = K.task_prefix .. holder
  local update = {'due_at', ms_text(U.due), 'updated_at', ms_text(U.now)}
  local given = {}
  for i = from, to - 1, 2 do
    local name = fields[i]
    if name == 'payload' or name == 'expires_at' or name == 'request_id' then
      update[#update + 1], update[#update + 2] = name, fields[i + 1]
      given[name] = true
    end
  end
  -- A submit leaves out an expiry or request id it does not have (a lean record): the holder
  -- loses its own then, as it took the submit's, and keeps the record lean (no empty field).
  local gone = {}
  if not given.expires_at then gone[#gone + 1] = 'expires_at' end
  if not given.request_id then gone[#gone + 1] = 'request_id' end
  if #gone > 0 then rcall('HDEL', tkey, unpack(gone)) end
  rcall('HSET', tkey, unpack(update))
  -- unique_holder found it in the schedule: a new score, the counts stay.
  rcall('ZADD', K.schedule, ms_text(U.due), holder)
  local life = U.retention_ms + math.max(0, U.due - U.now)
  rcall('PEXPIRE', tkey, ms_text(life))
  rcall('SET', U.key, holder .. '|' .. ms_text(U.due), 'PX', ms_text(life))
end

-- The new task takes the key. while_active's cap counts from when the task is due (default: the
-- task's retention, as long as its record is kept); throttle's window from the submit; debounce's
-- key lives as long as the waiting record.
local function unique_hold(U, task_id)
  local wait = math.max(0, U.due - U.now)
  local until_ms, life
  if U.mode == 'throttle' then
    until_ms, life = U.now + U.window_ms, U.window_ms
  elseif U.mode == 'debounce' then
    until_ms, life = U.now + wait, wait + U.retention_ms
  else
    local cap = U.window_ms > 0 and U.window_ms or U.retention_ms
    until_ms, life = U.now + wait + cap, wait + cap
  end
  rcall('SET', U.key, task_id .. '|' .. ms_text(until_ms), 'PX', ms_text(life))
end
