-- Break-glass: drops every holder of a name, tells each at once on its own channel, and wakes
-- whoever is next. The token counter (in the meta hash) is untouched.
--
-- KEYS: 1 meta hash, 2 queue zset, 3 xqueue zset, 4 readers zset, 5 rinfo hash, 6 .. slot
-- hashes. ARGV: 1 wake channel prefix, 2 revocation channel prefix. Returns how many live
-- holders were dropped.
-- Holders are told on their own channels, and the line woken: refused before any write when
-- this user may not publish there.
may_publish(ARGV[2])
may_wake(KEYS[2], ARGV[1])
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local dropped = 0
for k = 6, #KEYS do
  local owner = redis.call('HGET', KEYS[k], 'owner')
  if owner then
    redis.call('DEL', KEYS[k])
    redis.call('PUBLISH', ARGV[2] .. owner, 'revoked')
    dropped = dropped + 1
  end
end
for _, owner in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. string.format('%d', now_ms), '+inf')) do
  redis.call('PUBLISH', ARGV[2] .. owner, 'revoked')
  dropped = dropped + 1
end
redis.call('DEL', KEYS[4], KEYS[5])
if dropped > 0 then
  wake_head(KEYS[2], KEYS[3], ARGV[1], tonumber(redis.call('HGET', KEYS[1], 'limit') or '1'))
end
return dropped
