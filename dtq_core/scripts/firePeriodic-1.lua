--[[
  Fire one periodic schedule: create the tasks of the ticks the caller computed as due, record
  the runs, and advance the schedule to its next tick (a new revision), all at once, so a tick is fired once
  whatever the leader does after (dies, stalls past its lease): the schedule's stored next tick
  and revision must still be the ones the caller read (compare-and-set), and each tick also
  leaves a marker of its own (Keys.periodic_tick: name and tick), which a second fire of the same
  tick finds.
  Three callers:
  - a tick (ARGV[1] a worker id): the leader's, fenced by the partition's lease;
  - a resume (ARGV[1] '', ARGV[3] 'resume'): an operator's. It resumes the schedule only while it
    is still paused at the revision read (two resumes at once: one resumes, the other finds it
    running and changes nothing), goes on from ARGV[5], and fires the misfire=run_once catch-up
    for the ticks that passed while paused in the same step, so the catch-up fires once with the
    resume that made it, or not at all;
  - a trigger (ARGV[1] '', ARGV[3] 'trigger'): an operator's "fire now": one task, not fenced,
    whatever overlap says; the schedule's next tick and revision are left as they are.
  overlap=skip (the hash's field) records a tick or catch-up as SKIPPED while the last task it
  fired is not finished; a full partition (DTQ_MAX_QUEUE_DEPTH) records QUEUE_FULL. Both advance
  all the same. The last task is read here when it is in this partition; one in another (the
  schedule was moved from another queue) is in another slot on a cluster, so the caller reads it
  and says (ARGV[16]).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] worker id ('' = an operator's call)  ARGV[2] schedule name
    ARGV[3] a tick: its next tick as read (ms); an operator's call: resume | trigger
    ARGV[4] its revision as read  ARGV[5] the next tick after this call (ms; a trigger: unused)
    ARGV[6] now (ms)  ARGV[7] now (ISO)  ARGV[8] retention (ms)
    ARGV[9] how long a tick's marker is kept (ms: DTQ_IDEM_TTL_S)
    ARGV[10] most entries in this partition's streams (0 = off)  ARGV[11] recent cap
    ARGV[12] runs kept  ARGV[13] missed ticks (misfire): '' none | skip | run_once
    ARGV[14] the first missed tick (ms)  ARGV[15] how many were missed
    ARGV[16] 1 when the schedule's last task is in another partition and the caller found it not
    finished, else 0
    ARGV[17..] tick (ms), its ISO form and the task id to give it, per tick to fire (ascending; a
    run_once catch-up first, for the first missed tick)
  Output:
    {OK, {task id, ...} created, fired (1) or stale (0: the schedule changed since it was read,
    is paused (a tick), or is not paused (a resume): nothing written)}; LEASE_LOST;
    {PERIODIC_NOT_FOUND}; {PARTITION_CLOSED} (the queue was deleted)
]]
-- #include common
-- #include create_task
local K = partition_keys(KEYS[1])
local worker_id, name = ARGV[1], ARGV[2]
local tick_call = worker_id ~= ''
local resume = not tick_call and ARGV[3] == 'resume'
local trigger = not tick_call and not resume
if tick_call and rcall('GET', K.lock) ~= worker_id then return CODE.LEASE_LOST end
local hkey = K.periodic_prefix .. name
local s = read_task(hkey, 'next', 'rev', 'paused', 'overlap', 'task_fields', 'last_task', 'runs')
if not s.task_fields then return {CODE.PERIODIC_NOT_FOUND} end
local owner = rcall('GET', K.owner)
if not owner then return {CODE.PARTITION_CLOSED} end
local queue = string.match(owner, '^(.*)|[^|]*$')
if tick_call and (s.paused == '1' or s.next ~= ARGV[3] or (s.rev or '0') ~= ARGV[4]) then
  return {CODE.OK, {}, 0}
end
if resume and (s.paused ~= '1' or (s.rev or '0') ~= ARGV[4]) then return {CODE.OK, {}, 0} end
local now_ms, now_iso = ARGV[6], ARGV[7]
local base = cjson.decode(s.task_fields)
local runs = {}
if s.runs and s.runs ~= '' then runs = cjson.decode(s.runs) end
local last_task = s.last_task or ''
local max_depth = tonumber(ARGV[10])
local created = {}

local function record(run)
  table.insert(runs, 1, run)
end

local function busy()
  if last_task == '' then return false end
  if string.sub(last_task, 1, #K.tag + 1) ~= K.tag .. '-' then return ARGV[16] == '1' end
  local status = rcall('HGET', K.task_prefix .. last_task, 'status')
  return status and not TERMINAL[status]
end

local function full()
  if max_depth <= 0 then return false end
  local depth = 0
  for _, p in ipairs({'high', 'normal', 'low'}) do depth = depth + rcall('XLEN', stream_key(K, queue, p)) end
  return depth >= max_depth
end

local function fire(tick, tick_iso, task_id, kind, missed)
  local run = {scheduled_for = tick, fired_at = now_ms, kind = kind, missed = missed}
  local marker = nil
  if not trigger then
    marker = string.format('%s%s:%s', K.periodic_tick_prefix, name, tick)
    if rcall('EXISTS', marker) == 1 then return end  -- fired already: a tick is never fired twice
  end
  if not trigger and s.overlap == 'skip' and busy() then
    run.outcome = 'SKIPPED'
  elseif full() then
    run.outcome = 'QUEUE_FULL'
  else
    local fields = {}
    for i = 1, #base do fields[i] = base[i] end
    for _, v in ipairs({'periodic_name', name, 'scheduled_for', tick_iso}) do fields[#fields + 1] = v end
    create_task(K, {task_id = task_id, queue = queue, priority = field(base, 'priority'), now_ms = now_ms,
                    now_iso = now_iso, due = 0, retention_ms = ARGV[8], idem_key = nil,
                    idem_ttl_ms = ARGV[9], recent_cap = ARGV[11], fields = fields, fields_from = 1})
    run.task_id = task_id
    last_task = task_id
    created[#created + 1] = task_id
  end
  if marker then rcall('SET', marker, run.task_id or '', 'PX', ARGV[9]) end
  record(run)
end

local first = 17
if ARGV[13] == 'skip' then
  record({scheduled_for = ARGV[14], fired_at = now_ms, kind = 'missed', missed = ARGV[15], outcome = 'MISSED'})
elseif ARGV[13] == 'run_once' then
  fire(ARGV[17], ARGV[18], ARGV[19], 'catch_up', ARGV[15])
  first = 20
end
for i = first, #ARGV, 3 do
  fire(ARGV[i], ARGV[i + 1], ARGV[i + 2], trigger and 'trigger' or 'tick', '0')
end
local keep = tonumber(ARGV[12])
while #runs > keep do table.remove(runs) end
local update = {'runs', cjson.encode(runs), 'last_task', last_task}
if resume then
  for _, v in ipairs({'paused', '0', 'paused_at', '', 'paused_by', '', 'paused_next', '', 'updated_at', now_ms}) do
    update[#update + 1] = v
  end
end
if not trigger then
  update[#update + 1], update[#update + 2] = 'next', ARGV[5]
  rcall('ZADD', K.periodic_index, ARGV[5], name)
  -- A new next tick is a new revision: a pause read before it would keep the tick just fired
  -- as the one to catch up from.
  rcall('HINCRBY', hkey, 'rev', 1)
end
rcall('HSET', hkey, unpack(update))
return {CODE.OK, created, 1}
