--[[
  One step of a filtered walk down one partition's recent-tasks index, newest first: read up to
  COUNT ids below a position and keep the tasks that match, here in Redis, so a filter that looks
  at thousands of tasks ships only the matching records. Read-only.
  The listing's order, across every partition (dtq_core.engine.tasks.Tasks.list merges them), is
  created time descending, then task id descending byte by byte: the order Redis keeps members of
  one score in, so a position (score, id) resumes exactly behind a task whatever its partition.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] upper score ('+inf' or created ms)
    ARGV[2] upper id: '' takes every task of the upper score; else only those after it in the order
    ARGV[3] COUNT (ids read at most)   ARGV[4] queue ('' = any)   ARGV[5] status ('' = any)
    ARGV[6] type ('' = any)   ARGV[7] stop after this many matches
    ARGV[8] stop after returning this many bytes (a record holds its payload, up to 1 MB)
    ARGV[9] periodic schedule name that fired it ('' or absent = any)
    ARGV[10] task id prefix ('' or absent = any)
    ARGV[11] lower score: created at or after this ms ('-inf' or absent = any)
    ARGV[12] text the payload, the last error or the error list contains, ignoring case ('' or
             absent = any; lower-cased by the caller): exactly Python's `text in value.lower()`
             for ASCII text (U+0130 and U+212A, the only other characters Python lower-cases to
             ASCII, are mapped first); the caller matches other text itself
    ARGV[13..] the same text as the bodies of JSON strings hold it, where that differs (quotes and
             backslashes escaped; one per JSON encoder): the payload and the error list are JSON,
             and either form found there is a match
  Output:
    {examined, 1 when the walk reached the oldest id else 0, score of the last id examined ('' if
    none), the last id examined, matches}: each match is {id, score, record}, the record a task
    hash as flat field/value pairs; ids whose hash expired are passed over.
]]
-- #include common
-- #include search
local K = partition_keys(KEYS[1])
local upper, upper_id, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local queue, status, ttype = ARGV[4], ARGV[5], ARGV[6]
local wanted, byte_budget, bytes = tonumber(ARGV[7]), tonumber(ARGV[8]), 0
local periodic = ARGV[9] or ''
local id_prefix, lower, text = ARGV[10] or '', ARGV[11] or '-inf', ARGV[12] or ''
if lower == '' then lower = '-inf' end
local filtering = queue ~= '' or status ~= '' or ttype ~= '' or periodic ~= '' or text ~= ''
local plain_texts, json_texts = {text}, {text}
for i = 13, #ARGV do json_texts[#json_texts + 1] = ARGV[i] end

-- Whether the text is in one of a task's texts: its last error (plain text), its payload or its
-- error list (JSON).
local function contains(t)
  return search_has(t.last_error, plain_texts) or search_has(t.payload, json_texts)
    or search_has(t.errors, json_texts)
end

-- a sorts before b as Redis sorts members of one score (byte by byte): Lua's own < follows the
-- server's locale.
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Skip the ids of the upper score that are not after upper_id: members of one score come in
-- descending order, so a binary search over that run finds how many (O(log n) reads).
local offset = 0
if upper_id ~= '' and upper ~= '+inf' then
  local lo, hi = 0, rcall('ZCOUNT', K.recent, upper, upper)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local member = rcall('ZREVRANGEBYSCORE', K.recent, upper, upper, 'LIMIT', mid, 1)[1]
    if before(member, upper_id) then hi = mid else lo = mid + 1 end
  end
  offset = lo
end

local rows = rcall('ZREVRANGEBYSCORE', K.recent, upper, lower, 'WITHSCORES', 'LIMIT', offset, count)
local matches, examined, last_score, last_id = {}, 0, '', ''
for i = 1, #rows, 2 do
  examined = examined + 1
  last_id, last_score = rows[i], rows[i + 1]
  local key = K.task_prefix .. last_id
  local keep = id_prefix == '' or string.sub(last_id, 1, #id_prefix) == id_prefix
  if keep and filtering then
    local t
    if text ~= '' then
      t = read_task(key, 'queue', 'status', 'type', 'periodic_name', 'payload', 'last_error', 'errors')
    else
      t = read_task(key, 'queue', 'status', 'type', 'periodic_name')
    end
    keep = t.status and (queue == '' or t.queue == queue) and (status == '' or t.status == status)
      and (ttype == '' or t.type == ttype) and (periodic == '' or t.periodic_name == periodic)
      and (text == '' or contains(t))
  end
  if keep then
    local record = rcall('HGETALL', key)
    if #record > 0 then  -- expired: its index entry outlives it until trimmed
      matches[#matches + 1] = {last_id, last_score, record}
      for _, value in ipairs(record) do bytes = bytes + #value end
      if #matches >= wanted or bytes >= byte_budget then break end
    end
  end
end
local read = #rows / 2
return {examined, (examined == read and read < count) and 1 or 0, last_score, last_id, matches}
