-- Extends a held slot, only if this run still owns it. PEXPIRE, never SET: a slot that expired
-- stays gone.
--
-- KEYS[1] slot hash. ARGV[1] owner id, ARGV[2] ttl ms. Returns 1 when extended, 0 when not ours.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
