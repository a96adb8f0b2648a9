--[[
  Register a new queue's partition layout, under the bound on queues (DTQ_MAX_QUEUES); a queue
  already registered keeps its layout (two submitters racing to create it agree on the first).
  Input:
    KEYS[1] partition registry hash (queue -> layout JSON)
    ARGV[1] queue  ARGV[2] layout JSON  ARGV[3] most queues (0 = no bound)
  Output:
    {OK, layout} registered; {EXISTING, layout} it was already; {QUEUE_LIMIT_REACHED, queues}
    (codes: CODE in includes/common.lua)
]]
-- #include common
local existing = rcall('HGET', KEYS[1], ARGV[1])
if existing then return {CODE.EXISTING, existing} end
local most = tonumber(ARGV[3])
if most > 0 then
  local count = rcall('HLEN', KEYS[1])
  if count >= most then return {CODE.QUEUE_LIMIT_REACHED, count} end
end
rcall('HSET', KEYS[1], ARGV[1], ARGV[2])
return {CODE.OK, ARGV[2]}
