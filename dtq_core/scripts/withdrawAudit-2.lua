--[[
  Withdraw the intent of an operator action that Redis refused before it changed anything (a
  queue not empty, a task finished meanwhile): refused requests are not audited.
  Both keys carry the {audit} hash tag, so they are in one slot (Redis Cluster).
  Input:
    KEYS[1] audit stream  KEYS[2] open operations (hash op id -> JSON)
    ARGV[1] operation id  ARGV[2] the intent entry's id
  Output:
    1 withdrawn; 0 the intent entry was already gone (trimmed)
]]
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('XDEL', KEYS[1], ARGV[2])
