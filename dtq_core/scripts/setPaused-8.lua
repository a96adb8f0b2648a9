--[[
  Pause or resume a queue: workers stop starting its tasks; in-flight ones finish. The event goes
  out only when the state changed (a second pause is audited by the caller, but is no event).
  A pause takes the queue out of the ready set (workers then read nothing of it; the fetch script
  checks the paused set itself too); a resume puts it back and wakes an idle worker for it.
  Input:
    KEYS[1] paused set  KEYS[2] events channel  KEYS[3] event seq  KEYS[4] known queues
    KEYS[5] who paused each paused queue, and when  KEYS[6] ready queues set
    KEYS[7] shared wake list  KEYS[8] the queue's wake list
    ARGV[1] queue  ARGV[2] 1 pause / 0 resume  ARGV[3] now (ms)  ARGV[4] now (ISO)  ARGV[5] actor
  Output:
    1 changed; 0 already in that state; QUEUE_NOT_FOUND (CODE in includes/common.lua) unknown queue
]]
-- #include common
if rcall('SISMEMBER', KEYS[4], ARGV[1]) == 0 then return CODE.QUEUE_NOT_FOUND end
local changed
if ARGV[2] == '1' then changed = rcall('SADD', KEYS[1], ARGV[1]) else changed = rcall('SREM', KEYS[1], ARGV[1]) end
if changed == 1 then
  if ARGV[2] == '1' then
    rcall('HSET', KEYS[5], ARGV[1], cjson.encode({by = ARGV[5], at = tonumber(ARGV[3])}))
    rcall('SREM', KEYS[6], ARGV[1])
  else
    rcall('HDEL', KEYS[5], ARGV[1])
    ring(KEYS[8], KEYS[6], KEYS[7], ARGV[1])  -- whatever waits in it is readable again
  end
  emit(KEYS[2], KEYS[3], ARGV[2] == '1' and 'queue.paused' or 'queue.resumed', nil, ARGV[1], nil, 0, ARGV[3],
       ARGV[4])
end
return changed
