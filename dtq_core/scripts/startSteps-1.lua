--[[
  Record that steps were created (W or C -> S), after createSteps made their tasks. A workflow
  cancelled meanwhile (or FAILED with its remaining work cancelled) records nothing: the caller
  cancels the tasks it just made.
  Input:
    KEYS[1] the workflow's partition key prefix
    ARGV[1] workflow id  ARGV[2] how long a finished workflow is kept (ms)  ARGV[3..] step indexes
  Output:
    {'ok'}; {'cancel', task ids} the workflow was cancelled; {'missing'}
]]
-- #include common
-- #include workflow
local K = partition_keys(KEYS[1])
local W = wf_keys(K, ARGV[1])
local keep_ms = tonumber(ARGV[2])
local w = read_task(W.w, 'status', 'cancelled_at')
if not w.status then return {'missing'} end
local reply = {'ok'}
if wf_stopped(w.status, w.cancelled_at) then
  local ids = {}
  for i = 3, #ARGV do
    local st = rcall('HGET', W.state, ARGV[i]) or 'W'
    if st ~= 'D' and st ~= 'T' and st ~= 'F' and st ~= 'K' then
      rcall('HSET', W.state, ARGV[i], 'C')
      rcall('HSET', W.reason, ARGV[i], 'workflow cancelled')
    end
    ids[#ids + 1] = cjson.decode(rcall('HGET', W.def, ARGV[i])).t
  end
  reply = {'cancel', ids}
else
  for i = 3, #ARGV do
    local st = rcall('HGET', W.state, ARGV[i]) or 'W'
    if st == 'W' or st == 'C' then
      rcall('HSET', W.state, ARGV[i], 'S')
      rcall('HDEL', W.reason, ARGV[i])
    end
  end
end
wf_retain(W, w.status, keep_ms, false)
return reply
