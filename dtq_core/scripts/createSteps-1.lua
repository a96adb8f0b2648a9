--[[
  Create workflow steps' tasks in one partition, each under its pre-assigned id, at most once:
  a step whose record, or whose creation marker (the idempotency key "wf:<task id>", kept
  DTQ_IDEM_TTL_S), exists is left alone, so an advance repeated after a crash creates nothing
  twice. Steps bypass the depth gate (their workflow was accepted whole).
  A partition that no longer serves the step's queue is closed: no owner (never opened, or its
  tombstone expired), a delete's tombstone ("deleted|<queue>|<epoch>"), or another queue's owner
  (the tag was given to a queue registered since). The caller registers the queue again and
  creates the step there, or fails it (dtq_core/worker/workflows.py).
  Input:
    KEYS[1] partition key prefix
    ARGV[1] now (ms)  ARGV[2] now (ISO)  ARGV[3] retention (ms)  ARGV[4] idempotency ttl (ms)
    ARGV[5] recent cap  ARGV[6] events (1/0)
    ARGV[7] JSON list of steps, each [task id, queue, priority, due (ms, 0 = now), fields]
    (fields: a list field, value, ...)
  Output:
    one reply per step: 'created', 'exists', or 'closed' (the partition does not serve its queue)
]]
-- #include common
-- #include create_task
local K = partition_keys(KEYS[1])
local now_ms, now_iso = ARGV[1], ARGV[2]
events_on = ARGV[6] ~= '0'
local owner = rcall('GET', K.owner)
local queue = owner and string.sub(owner, 1, 8) ~= 'deleted|' and string.match(owner, '^(.*)|[^|]*$')
local out = {}
for _, s in ipairs(cjson.decode(ARGV[7])) do
  local task_id = s[1]
  local idem_key = K.idem_prefix .. 'wf:' .. task_id
  if rcall('EXISTS', K.task_prefix .. task_id) == 1 or rcall('EXISTS', idem_key) == 1 then
    out[#out + 1] = 'exists'
  elseif queue ~= s[2] then
    out[#out + 1] = 'closed'
  else
    create_task(K, {task_id = task_id, queue = queue, priority = s[3], now_ms = now_ms, now_iso = now_iso,
                    due = tonumber(s[4]), retention_ms = ARGV[3], idem_key = idem_key, idem_ttl_ms = ARGV[4],
                    recent_cap = ARGV[5], fields = s[5], fields_from = 1})
    out[#out + 1] = 'created'
  end
end
return out
