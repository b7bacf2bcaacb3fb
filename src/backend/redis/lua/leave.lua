-- A waiter that gives up leaves the line, and the others are woken: the line moved.
--
-- KEYS[1] queue zset, KEYS[2] beats zset. ARGV[1] waiter id, ARGV[2] channel.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed > 0 then
  redis.call('PUBLISH', ARGV[2], 'left')
end
return removed
