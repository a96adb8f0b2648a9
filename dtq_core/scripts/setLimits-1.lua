--[[
  Set one partition's share of its queue's flow-control limits (includes/limits.lua), replacing
  what it held (a limit left empty is no limit). Tasks parked while their group was full go back
  to their streams (each is judged again at its claim under the new limits) and the partition is
  rung, so workers held back by the old limits look again. A queue-wide change is one call per
  partition, pipelined; each call is idempotent.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] owner ("queue|epoch", the caller's layout)  ARGV[2] now (ms)
    ARGV[3] the queue-wide limits as set (JSON, '' = none)  ARGV[4] source (api|settings)
    ARGV[5] the settings value last applied (JSON, '' = none: DTQ_QUEUE_LIMITS does not name the
            queue)
    ARGV[6..11] this partition's share: conc, rate_n, rate_ms, gconc, grate_n, grate_ms ('' = none)
  Output:
    {OK}; {PARTITION_CLOSED} when the partition is another layout's (codes: CODE in
    includes/common.lua)
]]
-- #include common
-- #include limits
local K = partition_keys(KEYS[1])
local current = rcall('GET', K.owner)
if current and current ~= ARGV[1] then return {CODE.PARTITION_CLOSED} end
local now = tonumber(ARGV[2])
local names = {'conc', 'rate_n', 'rate_ms', 'gconc', 'grate_n', 'grate_ms'}
rcall('HDEL', K.limits, 'spec', 'source', 'settings', unpack(names))
local set = {}
for i, name in ipairs(names) do
  local v = ARGV[5 + i]
  if v ~= '' then set[#set + 1], set[#set + 2] = name, v end
end
if ARGV[7] == '' then rcall('DEL', K.limits_rate) end
if ARGV[9] == '' then
  -- No group concurrency: no task holds a group slot any more (none is given back twice).
  rcall('DEL', K.limits_held, K.limits_groups)
end
local pause = tonumber(rcall('HGET', K.limits, 'pause_until') or '0') or 0
if #set == 0 and ARGV[3] == '' and ARGV[5] == '' and pause <= now and rcall('HEXISTS', K.limits, 'gpaused') == 0 then
  -- Nothing left to enforce: the queue's fetches are back to one read of a missing key.
  rcall('DEL', K.limits)
else
  if #set > 0 then rcall('HSET', K.limits, unpack(set)) end
  rcall('HSET', K.limits, 'source', ARGV[4], 'updated_at', ARGV[2])
  if ARGV[3] ~= '' then rcall('HSET', K.limits, 'spec', ARGV[3]) end
  if ARGV[5] ~= '' then rcall('HSET', K.limits, 'settings', ARGV[5]) else rcall('HDEL', K.limits, 'settings') end
end
limits_unpark_all(K)
-- Held-back workers cleared the flag: a freed limit must reach them.
clear_ready(K)
ring(K)
return {CODE.OK}
