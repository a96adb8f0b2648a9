--[[
  Record how far running attempts got (a handler's ctx.progress, rate-limited by the worker:
  dtq_core/worker/progress.py), and say so on the events channel. Fenced like completeTasks: only
  a task that is RUNNING at the reported attempt under the reported stream entry is changed, so a
  stale report (a peer reclaimed the task, or it already ended) writes nothing. The entry matters:
  an attempt number repeats (a DLQ retry starts again at 1, a paused queue's deferral requeues the
  same number), and a run that outlived its attempt must not write over the run of the new entry.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] now (ms)  ARGV[2] now (UTC ISO)  ARGV[3] events: 1 publish task.progress, 0 not
    ARGV[4..] groups of 6: task id, stream entry id of the attempt, attempt, done,
              total ('' = unknown), message
  Output:
    how many records were written
]]
-- #include common
local K = partition_keys(KEYS[1])
local now_ms, now_iso, publish = ARGV[1], ARGV[2], ARGV[3] == '1'
local written = 0
for i = 4, #ARGV, 6 do
  local task_id, entry_id, attempt = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local done, total, message = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local tkey = K.task_prefix .. task_id
  local t = read_task(tkey, 'status', 'attempt', 'entry_id', 'queue')
  if t.status == 'RUNNING' and t.attempt == attempt and t.entry_id == entry_id then
    rcall('HSET', tkey, 'progress_done', done, 'progress_total', total, 'progress_message', message,
          'progress_at', now_ms)
    written = written + 1
    if publish then
      local seq = rcall('INCR', K.event_seq)
      rcall('PUBLISH', K.events_channel, cjson.encode({
        event_id = table.concat({now_ms, K.tag, seq}, '-'), type = 'task.progress', task_id = task_id,
        queue = t.queue, status = 'RUNNING', attempt = tonumber(attempt), ts = now_iso,
        progress = {done = tonumber(done), total = tonumber(total) or cjson.null, message = message}}))
    end
  end
end
return written
