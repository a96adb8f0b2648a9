--[[
  Renew a lock only while this worker still holds it (compare and renew); with ARGV[3] = 1, also
  take it when nobody holds it (SET NX). The scheduler election (Keys.leader) is renewed only:
  a worker that lost it stands again with SET NX like every candidate. A partition's lease
  (Keys.lock(tag), in the partition's slot) is taken or renewed by the elected leader each tick.
  Input:
    KEYS[1] lock (the election key, or a partition's lease)
    ARGV[1] worker id  ARGV[2] ttl (ms)  ARGV[3] 1: take it when free; 0: renew only
  Output:
    1 held by this worker now (renewed or taken); 0 it belongs to someone else (or expired, when
    renewing only)
]]
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not current and ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
