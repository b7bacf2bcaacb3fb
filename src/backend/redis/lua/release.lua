-- Gives a slot up, only if this run still owns it, and wakes the waiters.
--
-- KEYS[1] slot hash. ARGV[1] owner id, ARGV[2] channel. Returns 1 when released, 0 when not ours.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
