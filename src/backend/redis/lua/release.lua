-- Gives an exclusive slot up, only if this run still owns it, and wakes whoever is next.
--
-- KEYS: 1 slot hash, 2 meta hash, 3 queue zset, 4 xqueue zset. ARGV: 1 owner id, 2 wake channel
-- prefix. Returns 1 when released, 0 when not ours.
may_wake(KEYS[3], ARGV[2])
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  wake_head(KEYS[3], KEYS[4], ARGV[2], tonumber(redis.call('HGET', KEYS[2], 'limit') or '1'))
  return 1
end
return 0
