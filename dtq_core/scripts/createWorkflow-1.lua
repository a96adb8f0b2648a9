--[[
  Write a workflow's step definitions, a chunk per call; the last call (final) opens it: status
  RUNNING, so only then do advances and reads see it, and writes its start into the partition's
  workflow outbox (field "wf:<workflow id>"), which advanceWorkflow turns into the steps with no
  dependency. A submit that dies before its last call leaves definitions that expire within a day
  and no workflow; one that dies after it leaves the start to the leader's re-drive.
  Input:
    KEYS[1] the workflow's partition key prefix (the workflow id's tag)
    ARGV[1] workflow id  ARGV[2] now (ms)  ARGV[3] final (1/0)  ARGV[4] steps total
    ARGV[5] the tree as JSON (final only)  ARGV[6] JSON list of [index, definition JSON, pending]
  Output:
    1 written (a chunk); the start's outbox entry (the final call); 0 a workflow of that id exists
    already (nothing written)
]]
-- #include common
-- #include workflow
local K = partition_keys(KEYS[1])
local W = wf_keys(K, ARGV[1])
if rcall('EXISTS', W.w) == 1 then return 0 end
local defs, pend = {}, {}
for _, e in ipairs(cjson.decode(ARGV[6])) do
  defs[#defs + 1], defs[#defs + 2] = e[1], e[2]
  if e[3] > 0 then pend[#pend + 1], pend[#pend + 2] = e[1], e[3] end
end
if #defs > 0 then rcall('HSET', W.def, unpack(defs)) end
if #pend > 0 then rcall('HSET', W.pending, unpack(pend)) end
if ARGV[3] == '1' then
  rcall('HSET', W.w, 'status', 'RUNNING', 'created_at', ARGV[2], 'updated_at', ARGV[2], 'steps_total', ARGV[4],
        'done', 0, 'failed', 0, 'root', ARGV[5])
  rcall('PERSIST', W.def)
  rcall('PERSIST', W.pending)
  -- Its start, as an outbox entry in this (its own) partition: the submit advances it at once
  -- (creating the steps with no dependency); should the submitter die first, the leader does.
  local start = cjson.encode({w = W.id, s = -1, st = 'START', r = ''})
  local field = string.format('wf:%s', W.id)  -- a field of the outbox, beside the task ids
  rcall('HSET', K.wf_outbox, field, start)
  rcall('ZADD', K.wf_outbox_due, ARGV[2], field)
  return start
else
  rcall('PEXPIRE', W.def, 86400000)
  if #pend > 0 then rcall('PEXPIRE', W.pending, 86400000) end
end
return 1
