-- The samples a completion adds to the partition's statistics besides its outcome counts: the
-- tasks finished in a minute by queue (Keys.throughput: the console's "finished / min") and the
-- run-time histogram of /metrics (Keys.stats_duration). completeTasks writes them with the batch,
-- or (a worker's batches, ARGV[10]) returns them for flushStats to write once a second.

-- Add finished counts (queue -> n) to the minute's hash. The key lives an hour from its first
-- count (a later PEXPIRE would only move that by a minute).
local function samples_write_finished(K, minute, finished)
  if next(finished) == nil then return end
  local key = K.throughput_prefix .. string.format('%d', minute)
  local new = false
  for field, n in pairs(finished) do new = rcall('HINCRBY', key, field, n) == n or new end
  if new then rcall('PEXPIRE', key, '3600000') end
end

-- Add run times to the histogram: counts by bucket label, and their sum in seconds.
local function samples_write_duration(K, buckets, sum)
  if next(buckets) == nil then return end
  for field, n in pairs(buckets) do rcall('HINCRBY', K.stats_duration, field, n) end
  rcall('HINCRBYFLOAT', K.stats_duration, 'sum', string.format('%.6f', sum))
end
