-- A waiter that gives up leaves the line, drops a slot that one of its tries took if the answer
-- never reached it, and wakes the others: the line moved.
--
-- KEYS[1] queue zset, KEYS[2] beats zset, KEYS[3 ..] slot hashes. ARGV[1] waiter id, ARGV[2]
-- channel. Returns how many entries (place in line, slots) were removed.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for k = 3, #KEYS do
  if redis.call('HGET', KEYS[k], 'owner') == ARGV[1] then
    redis.call('DEL', KEYS[k])
    removed = removed + 1
  end
end
if removed > 0 then
  redis.call('PUBLISH', ARGV[2], 'left')
end
return removed
