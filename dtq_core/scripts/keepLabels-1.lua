--[[
  Decide once, for good, whether a queue or task type keeps a label of its own on /metrics
  (dtq_tasks_total): the first values seen while their kind has room keep theirs, every later
  one is counted under "other". A decision never changes until an operator deletes the hash, so
  "other" stays a sum over a fixed set of counters that only grow: it never goes back.
  Input:
    KEYS[1] labels hash: field "queue:<name>" or "type:<name>" -> "kept" or "other", and
            field "#<kind>" -> how many values of that kind were kept
    ARGV[1] queue cap  ARGV[2] registered type cap  ARGV[3] unregistered type cap
    ARGV[4..] values not decided yet, most counted first, as pairs: kind ("queue", "type" or
              "unregistered_type"), name
  Output:
    each pair's decision, in order: "kept" or "other" (one another scrape made stands)
]]
local labels = KEYS[1]
local caps = {queue = tonumber(ARGV[1]), type = tonumber(ARGV[2]), unregistered_type = tonumber(ARGV[3])}
local decisions = {}
for i = 4, #ARGV, 2 do
  local kind, name = ARGV[i], ARGV[i + 1]
  -- A type is decided once whatever its kind: registered now, it may be forgotten later.
  local field = (kind == 'queue' and 'queue:' or 'type:') .. name
  local decision = redis.call('HGET', labels, field)
  if not decision then
    local count = tonumber(redis.call('HGET', labels, '#' .. kind) or '0')
    decision = count < caps[kind] and 'kept' or 'other'
    if decision == 'kept' then redis.call('HINCRBY', labels, '#' .. kind, 1) end
    redis.call('HSET', labels, field, decision)
  end
  decisions[#decisions + 1] = decision
end
return decisions
