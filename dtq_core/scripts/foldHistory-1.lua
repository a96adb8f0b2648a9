--[[
  Fold a run of history hashes into one of a coarser resolution (the leader's history roll-up,
  dtq_core/worker/history.py): the minutes of an hour into the hour, the hours of a day into the
  day. The target is replaced, not added to, so a fold run again (a new leader, a retry after an
  error) gives the same hash. Every key is built from the scope's prefix (below): a partition's
  history (Keys.history) or one of the global roll-ups (Keys.global_history), each in one slot.
  Input:
    KEYS[1] the scope's key prefix ("<...>:hist:" or "<prefix>:{hist}:<scope>:")
    ARGV[1] source resolution letter (m|h)  ARGV[2] its first unit  ARGV[3] how many units
    ARGV[4] target resolution letter (h|d)  ARGV[5] the target unit  ARGV[6] the target's TTL (ms)
    ARGV[7] sum | max (counts add up; depth samples keep their peak)
  Output:
    the number of fields the target holds (0: nothing to keep, and no key is written)
]]
local rcall = redis.call
-- The resolutions' key suffixes (Keys.history): fixed here, so no key name comes from ARGV.
local SUFFIX = {m = 'm:', h = 'h:', d = 'd:'}
local prefix, first, count = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local source, target_suffix = SUFFIX[ARGV[1]], SUFFIX[ARGV[4]]
if not source or not target_suffix then return error('resolutions are m, h or d', 0) end
local use_max = ARGV[7] == 'max'
local total, names = {}, {}
for unit = first, first + count - 1 do
  local fields = rcall('HGETALL', prefix .. source .. string.format('%d', unit))
  for i = 1, #fields, 2 do
    local name, n = fields[i], tonumber(fields[i + 1]) or 0
    local had = total[name]
    if had == nil then
      names[#names + 1] = name
      total[name] = n
    elseif use_max then
      if n > had then total[name] = n end
    else
      total[name] = had + n
    end
  end
end
local target = prefix .. target_suffix .. string.format('%d', tonumber(ARGV[5]))
rcall('DEL', target)
if #names == 0 then return 0 end
local args = {}
for _, name in ipairs(names) do
  args[#args + 1] = name
  args[#args + 1] = string.format('%d', total[name])
end
for i = 1, #args, 1000 do
  rcall('HSET', target, unpack(args, i, math.min(i + 999, #args)))
end
rcall('PEXPIRE', target, ARGV[6])
return #names
