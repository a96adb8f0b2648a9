--[[
  Compare and delete: drop a lock or lease only while it still holds this caller's value. Used for
  the scheduler election and the partitions' leases on shutdown, and for idempotent_operation's
  lease after fn failed: a lease that expired meanwhile may belong to the next caller, and a GET
  then DEL would delete theirs.
  Input:
    KEYS[1] lock or lease  ARGV[1] the value this caller set (worker id, lease marker)
  Output:
    1 released; 0 not ours (expired, or taken by someone else)
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
