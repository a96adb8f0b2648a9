--[[
  Put claimed schedule entries into their streams (XADD before the claim is removed), moving
  PENDING/RETRYING tasks to QUEUED with the next attempt number. A task that moved on meanwhile
  (cancelled, or already queued by a duplicate claim) is not queued again. Fenced on the lock.
  Input:
    KEYS[1] schedule claims  KEYS[2] scheduler lock  KEYS[3] events channel  KEYS[4] event seq
    KEYS[5] schedule  KEYS[6] per-outcome task counts (stats)
    ARGV[1] worker id  ARGV[2] now (ms)  ARGV[3] now (ISO)  ARGV[4] retention (ms)
    ARGV[5] task key prefix  ARGV[6] stream key prefix  ARGV[7] wake key prefix  ARGV[8..] task ids
  Output:
    number of tasks queued, or -1 when this worker does not hold the lock
]]
-- #include common
if rcall('GET', KEYS[2]) ~= ARGV[1] then return -1 end
local now_ms, now_iso = ARGV[2], ARGV[3]
local queued = 0
for i = 8, #ARGV do
  local id = ARGV[i]
  local tkey = ARGV[5] .. id
  local h = rcall('HMGET', tkey, 'status', 'attempt', 'queue', 'priority', 'expires_at', 'type')
  if h[1] == 'PENDING' or h[1] == 'RETRYING' then
    if h[5] and h[5] ~= '' and tonumber(h[5]) <= tonumber(now_ms) then
      rcall('HSET', tkey, 'status', 'EXPIRED', 'finished_at', now_ms, 'updated_at', now_ms)
      rcall('HINCRBY', KEYS[6], outcome_field(h[3], h[6], 'EXPIRED'), 1)
      emit(KEYS[3], KEYS[4], 'task.expired', id, h[3], 'EXPIRED', h[2], now_ms, now_iso)
    else
      local stream = ARGV[6] .. h[3] .. ':' .. h[4]
      local eid = rcall('XADD', stream, '*', 'task_id', id, 'attempt', tonumber(h[2]) + 1)
      rcall('HSET', tkey, 'status', 'QUEUED', 'enqueued_at', now_ms, 'updated_at', now_ms, 'entry_id', eid)
      ring(ARGV[7] .. h[3])
      emit(KEYS[3], KEYS[4], 'task.queued', id, h[3], 'QUEUED', h[2], now_ms, now_iso)
      queued = queued + 1
    end
    rcall('PEXPIRE', tkey, ARGV[4])
  end
  rcall('ZREM', KEYS[1], id)
end
return queued
