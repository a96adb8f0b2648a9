--[[
  Pause or resume one partition of a queue: workers stop starting its tasks; in-flight ones
  finish. The fetch script reads the partition's paused flag in the same script as its read, so
  a pause holds from the next fetch on. A queue-wide pause is one call per partition (pipelined);
  a repeated call changes nothing, so a pause cut short is finished by pausing again.
  A resume rings the partition even when its ready flag is still set (left set while it was
  paused), so an idle worker reads whatever waits in it now.
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition)
    ARGV[1] owner ("queue|epoch", the caller's layout)  ARGV[2] 1 pause / 0 resume
    ARGV[3] now (ms)  ARGV[4] actor
  Output:
    {changed (1 or 0), the pause in force (JSON {"by", "at"}, '' when not paused)};
    {PARTITION_CLOSED} when the partition is another layout's (deleted, or of another life)
    (codes: CODE in includes/common.lua)
]]
-- #include common
local K = partition_keys(KEYS[1])
-- No owner at all (a partition registered and not opened yet): still the layout's to pause.
local current = rcall('GET', K.owner)
if current and current ~= ARGV[1] then return {CODE.PARTITION_CLOSED} end
local changed = 0
if ARGV[2] == '1' then
  if rcall('EXISTS', K.paused) == 0 then
    rcall('SET', K.paused, cjson.encode({by = ARGV[4], at = tonumber(ARGV[3])}))
    changed = 1
  end
  return {changed, rcall('GET', K.paused)}
end
if rcall('DEL', K.paused) == 1 then
  changed = 1
  clear_ready(K)
  ring(K)  -- whatever waits in it is readable again
end
return {changed, ''}
