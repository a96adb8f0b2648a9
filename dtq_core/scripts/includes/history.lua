-- Task history (docs/console.md, "History"; read by dtq_core/history.py): per partition and epoch
-- minute, one hash (K.hist .. 'm:' .. minute) of counts by task type: "<type>|<outcome letter>"
-- and the wait and run time histograms "<type>|w<bucket>" and "<type>|r<bucket>" (history_bucket,
-- mirrored by dtq_core.history.bucket_of). The leader folds minutes into hours and hours into days
-- (foldHistory-1.lua). history_add writes at once, unless the script set history_batched: then it
-- writes once, at its end, with history_flush (completeTasks: one HINCRBY per distinct field of
-- the batch, not per task).
-- 25 h: the 24 h range, and the leader's fold of the last hour (text: redis.call prints a number)
local HISTORY_MINUTE_TTL_MS = '90000000'
-- Types per partition with a series of their own; tasks of later types count as "(other)", a name
-- no task type can have (dtq_core.task.TASK_TYPE_RE), so a queue's history has a bounded size.
local HISTORY_MAX_TYPES = 100
local HISTORY_OTHER = '(other)'
local HISTORY_OUTCOME = {SUCCEEDED = 's', FAILED = 'f', RETRYING = 'r', DEAD_LETTERED = 'd', CANCELLED = 'c',
                         EXPIRED = 'e'}
local HISTORY_LOG2X2 = 2.8853900817779268  -- 2 / ln 2 (a literal: a Redis function library may not call math as it loads)
local history_fields, history_names = {}, {}
local history_batched = false
-- Set by a completion whose worker writes the samples later (completeTasks' ARGV[10]): a type is
-- counted under its own name, and flushStats maps it to its series when the samples land.
local history_raw = false

-- The series name of a task type in this partition: itself while the partition has fewer than
-- HISTORY_MAX_TYPES, "(other)" past them. Asked once per type and script call.
local function history_type(K, ttype)
  ttype = ttype or ''
  if history_raw and ttype ~= '' then return ttype end
  local name = history_names[ttype]
  if name then return name end
  name = ttype
  if ttype == '' then
    name = HISTORY_OTHER
  elseif rcall('SISMEMBER', K.hist_types, ttype) == 0 then
    if rcall('SCARD', K.hist_types) < HISTORY_MAX_TYPES then
      rcall('SADD', K.hist_types, ttype)
    else
      name = HISTORY_OTHER
    end
  end
  history_names[ttype] = name
  return name
end

-- Bucket b >= 1 holds durations in [2^((b-1)/2), 2^(b/2)) ms; 0 holds under 1 ms; 60 everything
-- from 2^29.5 ms (about 8.5 days) on.
local function history_bucket(ms)
  if ms < 1 then return 0 end
  local b = math.floor(math.log(ms) * HISTORY_LOG2X2) + 1
  if b > 60 then return 60 end
  return b
end

local function history_bump(name)
  history_fields[name] = (history_fields[name] or 0) + 1
end

-- Add counts (field name -> n) to the history of a minute (a number: ms since the epoch / 60000).
-- The key's TTL is set when this call created it (a later PEXPIRE would only move it by a minute).
local function history_write(K, minute, fields)
  local key = K.hist .. 'm:' .. string.format('%d', minute)
  local new = false
  for name, n in pairs(fields) do new = rcall('HINCRBY', key, name, n) == n or new end
  if new then rcall('PEXPIRE', key, HISTORY_MINUTE_TTL_MS) end
end

-- Write what history_add counted into the minute of now_ms.
local function history_flush(K, now_ms)
  if next(history_fields) == nil then return end
  history_write(K, math.floor(tonumber(now_ms) / 60000), history_fields)
  history_fields = {}
end

-- Count one outcome of a task of this type (a status of HISTORY_OUTCOME: others are no outcome)
-- at now_ms and, when given, the wait (ready to started) and run times of its attempt, in ms.
local function history_add(K, now_ms, ttype, status, wait_ms, run_ms)
  local name = history_type(K, ttype)
  local code = HISTORY_OUTCOME[status]
  if code then history_bump(name .. '|' .. code) end
  if wait_ms then history_bump(name .. '|w' .. history_bucket(wait_ms)) end
  if run_ms then history_bump(name .. '|r' .. history_bucket(run_ms)) end
  if not history_batched then history_flush(K, now_ms) end
end

-- The ms at which a stream entry was added (its id's first part, from Redis's clock).
local function entry_ms(entry_id)
  return tonumber(string.match(entry_id or '', '^(%d+)-'))
end
