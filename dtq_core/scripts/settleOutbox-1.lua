--[[
  Delete workflow outbox entries once their advance is done: only an entry still holding what the
  caller read (the same task may have ended again since, after a DLQ retry: that newer entry stays).
  Input:
    KEYS[1] partition key prefix
    ARGV[1..] pairs: task id, the entry as read
  Output:
    how many entries were deleted
]]
-- #include common
local K = partition_keys(KEYS[1])
local n = 0
for i = 1, #ARGV, 2 do
  if rcall('HGET', K.wf_outbox, ARGV[i]) == ARGV[i + 1] then
    rcall('HDEL', K.wf_outbox, ARGV[i])
    rcall('ZREM', K.wf_outbox_due, ARGV[i])
    n = n + 1
  end
end
return n
