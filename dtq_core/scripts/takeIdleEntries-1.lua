--[[
  Take over the pending entries silent workers left in one partition: those idle for at least the
  visibility timeout, across the given streams, highest priority first, up to COUNT in all. XPENDING's
  IDLE filter walks a stream's whole pending list in one call, so an entry behind any number of
  live (freshly refreshed) ones is found in the first round it is due (XAUTOCLAIM from 0-0
  examines only 10 x COUNT entries per call, and would leave it behind them). The entries
  become ours, their idle time reset; claimEntries then charges the lost attempt.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] group   ARGV[2] worker id (the new owner)   ARGV[3] min idle (ms)   ARGV[4] count
    ARGV[5..] streams after the partition's stream key prefix (queue:priority), highest priority
              first (a stream or group that is gone is skipped)
  Output:
    {deleted, {{stream key, entry id, task id, entry attempt, previous owner}, ...}}: the entries
    taken, and how many idle ones had been deleted from their stream (XCLAIM drops those from
    the pending list; the leader's lost-task sweep requeues their tasks)
]]
-- #include common
local K = partition_keys(KEYS[1])
local group, me, min_idle = ARGV[1], ARGV[2], ARGV[3]
local remaining = tonumber(ARGV[4])
local taken, deleted = {}, 0
for i = 5, #ARGV do
  if remaining <= 0 then break end
  local stream = K.stream_prefix .. ARGV[i]
  local idle = redis.pcall('XPENDING', stream, group, 'IDLE', min_idle, '-', '+', remaining)
  if not idle.err then
    for _, p in ipairs(idle) do
      local entry_id, owner = p[1], p[2]
      -- Idle a moment ago in this same script, so XCLAIM takes it unless it left the stream.
      local claimed = rcall('XCLAIM', stream, group, me, min_idle, entry_id)[1]
      if claimed then
        local fields, task_id, attempt = claimed[2], '', '1'
        for f = 1, #fields, 2 do
          if fields[f] == 'task_id' then task_id = fields[f + 1]
          elseif fields[f] == 'attempt' then attempt = fields[f + 1] end
        end
        taken[#taken + 1] = {stream, entry_id, task_id, attempt, owner}
        remaining = remaining - 1
      else
        deleted = deleted + 1
      end
    end
  end
end
return {deleted, taken}
