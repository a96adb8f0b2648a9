--[[
  Replace one queue's partition layout in the registry only if it is still the one the caller
  read (compare and set): the leader resizes a queue (DTQ_QUEUE_PARTITIONS) without losing a
  change made meanwhile (a delete, a new registration, a second leader's resize).
  Input:
    KEYS[1] partition registry hash (queue -> layout JSON)
    ARGV[1] queue  ARGV[2] the layout JSON read  ARGV[3] the new layout JSON
  Output:
    1 replaced; 0 the queue's layout is no longer ARGV[2] (nothing written)
]]
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
