--[[
  Keep this worker's in-flight entries of one partition fresh so the visibility reaper never takes work from a
  live owner: reset the idle time of each entry that is still ours (never one a peer took), and
  refresh the task's score in the running index while the task hash still names us, so the
  lost-task sweep leaves it alone even when its entry was deleted from the stream.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] group  ARGV[2] worker id  ARGV[3] now (ms)
    ARGV[4..] triples: stream (after the partition's stream key prefix: queue:priority), entry id,
              task id
  Output:
    number of entries refreshed
]]
-- #include common
local K = partition_keys(KEYS[1])
local touched = 0
local function touch(stream, entry_id, task_id)
  local info = rcall('XPENDING', stream, ARGV[1], entry_id, entry_id, 1)[1]
  if info and info[2] == ARGV[2] then
    -- XCLAIM also drops the entry from the PEL if it was deleted from the stream (Redis 7).
    rcall('XCLAIM', stream, ARGV[1], ARGV[2], 0, entry_id, 'JUSTID')
    touched = touched + 1
  end
  local t = read_task(K.task_prefix .. task_id, 'status', 'entry_id', 'worker_id')
  if t.status == 'RUNNING' and t.entry_id == entry_id and t.worker_id == ARGV[2] then
    rcall('ZADD', K.running, 'XX', ARGV[3], task_id)
  end
end
for i = 4, #ARGV, 3 do
  -- pcall: one key overwritten by hand (another type) must not stop the heartbeat for the rest.
  pcall(touch, K.stream_prefix .. ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
return touched
