-- Gives a shared hold up, only this run's own, and wakes whoever is next once the last shared
-- holder is gone.
--
-- KEYS: 1 readers zset, 2 rinfo hash, 3 meta hash, 4 queue zset, 5 xqueue zset. ARGV: 1 owner
-- id, 2 wake channel prefix. Returns 1 when released, 0 when not ours.
may_wake(KEYS[4], ARGV[2])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  if redis.call('ZCARD', KEYS[1]) == 0 then
    wake_head(KEYS[4], KEYS[5], ARGV[2], tonumber(redis.call('HGET', KEYS[3], 'limit') or '1'))
  end
  return 1
end
return 0
