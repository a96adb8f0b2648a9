-- Take a partition's statistics out of it, for a caller that forgets the partition (closePartition,
-- deleteQueue drop). Needs: common.
-- The three hashes behind dtq_tasks_total and the other /metrics counters (stats:tasks,
-- stats:duration, stats:counters) are returned as HGETALL gives them and deleted in the same
-- step: however many callers race (two deletes, a retried close), exactly one gets the counts and
-- adds them to the global hashes (dtq_core/engine/registry.py, fold_stats). Those live in another
-- slot on a cluster, so this script cannot add them itself.
local function take_stats(K)
  local taken = {}
  for i, key in ipairs({K.stats_tasks, K.stats_duration, K.stats_counters}) do taken[i] = rcall('HGETALL', key) end
  rcall('DEL', K.stats_tasks, K.stats_duration, K.stats_counters)
  return taken
end
