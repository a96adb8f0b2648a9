--[[
  One step of a filtered walk down the recent-tasks index, newest first: read up to COUNT ids
  below a score and keep the tasks that match, here in Redis, so a filter that looks at
  thousands of tasks ships only the matching records. Read-only.
  The cursor bookkeeping is the caller's (dtq_core.engine.tasks.Tasks.list): tasks of one
  millisecond share a score, so the walk counts how many of the last score it has passed.
  Input:
    KEYS[1] recent tasks zset (score: created ms)   KEYS[2] task key prefix (prefix .. task id)
    ARGV[1] upper score ('+inf' or a score)   ARGV[2] offset among the ids at or below it
    ARGV[3] COUNT   ARGV[4] queue ('' = any)   ARGV[5] status ('' = any)   ARGV[6] type ('' = any)
    ARGV[7] stop after this many matches
    ARGV[8] last score passed ('' = none)   ARGV[9] ids of that score passed
    ARGV[10] stop after returning this many bytes (a record holds its payload, up to 1 MB)
  Output:
    {examined, ids read, last score passed ('' if none), ids of it passed, records, positions}:
    each record is a task hash as flat field/value pairs, and its position the {score, ids of it
    passed} just after it (a cursor that resumes behind it); ids whose hash expired are passed
    over.
]]
-- #include common
local queue, status, ttype, prefix = ARGV[4], ARGV[5], ARGV[6], KEYS[2]
local wanted = tonumber(ARGV[7])
local last_score, seen = ARGV[8], tonumber(ARGV[9])
local byte_budget, bytes = tonumber(ARGV[10]), 0
local filtering = queue ~= '' or status ~= '' or ttype ~= ''
local rows = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', ARGV[2], ARGV[3])
local records, positions, examined = {}, {}, 0
for i = 1, #rows, 2 do
  examined = examined + 1
  local score = rows[i + 1]
  if score == last_score then seen = seen + 1 else last_score, seen = score, 1 end
  local key = prefix .. rows[i]
  local keep = true
  if filtering then
    local t = read_task(key, 'queue', 'status', 'type')
    keep = t.status and (queue == '' or t.queue == queue) and (status == '' or t.status == status)
      and (ttype == '' or t.type == ttype)
  end
  if keep then
    local record = redis.call('HGETALL', key)
    if #record > 0 then  -- expired: its index entry outlives it until trimmed
      records[#records + 1] = record
      positions[#positions + 1] = {score, seen}
      for _, value in ipairs(record) do bytes = bytes + #value end
      if #records >= wanted or bytes >= byte_budget then break end
    end
  end
end
return {examined, #rows / 2, last_score, seen, records, positions}
