--[[
  Tell a live worker to quiet (stop taking tasks, finish what it runs, stay up) or to stop (drain
  and exit, as SIGTERM), through its own record: the worker reads the `control` field with every
  heartbeat. Only a worker whose record exists and that heartbeats can be told: a lost one (its
  last heartbeat at or before the cutoff, the state `worker list` shows as lost) would never read
  it, so telling it would promise a drain that cannot happen. Stop outranks quiet.
  Input:
    KEYS[1] the worker's record (dtq_core.keys.Keys.worker)
    ARGV[1] quiet | stop  ARGV[2] who (the audit actor)  ARGV[3] now (ms)
    ARGV[4] lost cutoff (ms): a heartbeat at or before it is a lost worker's
  Output:
    0: no such worker (no record: never seen, or gone); 1: told; 2: it was told so already (or
    to stop, when asked to quiet); 3: lost (silent past the cutoff): not told
]]
local rcall = redis.call
if rcall('EXISTS', KEYS[1]) == 0 then return 0 end
-- A record without heartbeat_at (written by hand) is taken as live: nothing says otherwise.
local heartbeat = tonumber(rcall('HGET', KEYS[1], 'heartbeat_at'))
if heartbeat and heartbeat <= tonumber(ARGV[4]) then return 3 end
local current = rcall('HGET', KEYS[1], 'control')
if current == ARGV[1] or (current == 'stop' and ARGV[1] == 'quiet') then return 2 end
rcall('HSET', KEYS[1], 'control', ARGV[1], 'control_by', ARGV[2], 'control_at', ARGV[3])
return 1
