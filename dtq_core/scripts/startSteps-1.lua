--[[
  Record that steps were created (W or C -> S), after createSteps made their tasks. A workflow
  cancelled meanwhile records nothing: the caller cancels the tasks it just made.
  Input:
    KEYS[1] the workflow's partition key prefix
    ARGV[1] workflow id  ARGV[2..] step indexes
  Output:
    {'ok'}; {'cancel', task ids} the workflow is CANCELLED; {'missing'}
]]
-- #include common
-- #include workflow
local K = partition_keys(KEYS[1])
local W = wf_keys(K, ARGV[1])
local status = rcall('HGET', W.w, 'status')
if not status then return {'missing'} end
if status == 'CANCELLED' then
  local ids = {}
  for i = 2, #ARGV do
    local st = rcall('HGET', W.state, ARGV[i]) or 'W'
    if st ~= 'D' and st ~= 'T' and st ~= 'F' then
      rcall('HSET', W.state, ARGV[i], 'C')
      rcall('HSET', W.reason, ARGV[i], 'workflow cancelled')
    end
    ids[#ids + 1] = cjson.decode(rcall('HGET', W.def, ARGV[i])).t
  end
  return {'cancel', ids}
end
for i = 2, #ARGV do
  local st = rcall('HGET', W.state, ARGV[i]) or 'W'
  if st == 'W' or st == 'C' then
    rcall('HSET', W.state, ARGV[i], 'S')
    rcall('HDEL', W.reason, ARGV[i])
  end
end
return {'ok'}
