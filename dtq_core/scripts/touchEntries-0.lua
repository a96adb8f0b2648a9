--[[
  Keep this worker's in-flight entries fresh so the visibility reaper never takes work from a
  live owner: reset the idle time of each entry that is still ours (never one a peer took).
  Input:
    ARGV[1] group  ARGV[2] worker id  ARGV[3..] pairs: stream, entry id
  Output:
    number of entries refreshed
]]
local rcall = redis.call
local touched = 0
for i = 3, #ARGV, 2 do
  local info = rcall('XPENDING', ARGV[i], ARGV[1], ARGV[i + 1], ARGV[i + 1], 1)[1]
  if info and info[2] == ARGV[2] then
    rcall('XCLAIM', ARGV[i], ARGV[1], ARGV[2], 0, ARGV[i + 1], 'JUSTID')
    touched = touched + 1
  end
end
return touched
