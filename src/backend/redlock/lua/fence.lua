-- The write-back of a fencing token, on ONE master: stamps the caller's hold here with the token the
-- client chose (the largest its quorum proposed), and raises this master's counter to it — unless
-- this master has already seen that token or a larger one (from another acquisition, or a
-- proposal of its own that the client did not wait for), which a quorum of others must then
-- accept, or the client outbid. Holds the caller has here in another slot than the agreed one are
-- dropped (the grants of one round may have named different slots). Prefixed with the Redis
-- backend's wake.lua. Why this makes tokens strictly rise: src/backend/redlock/fence.rs.
--
-- KEYS: 1 meta hash, 2 queue zset, 3 xqueue zset, 4 readers zset, 5 rinfo hash, 6 .. slot hashes
-- 0 .. limit-1. ARGV: 1 owner id, 2 token, 3 mode ('x' or 's'), 4 the agreed slot, 5 wake channel
-- prefix.
-- Returns {0, counter before} when written; {1, counter} when the token is not above what this
-- master has seen.
local owner = ARGV[1]
local token = tonumber(ARGV[2])
-- The caller's hold here carries the token (for status), whatever this master's counter says.
if ARGV[3] == 's' then
  local stored = redis.call('HGET', KEYS[5], owner)
  if stored then
    local bar = string.find(stored, '|', 1, true) or 0
    redis.call('HSET', KEYS[5], owner, ARGV[2] .. '|' .. string.sub(stored, bar + 1))
  end
else
  local dropped = 0
  local slot = tonumber(ARGV[4])
  for k = 6, #KEYS do
    if redis.call('HGET', KEYS[k], 'owner') == owner then
      if k - 6 == slot then
        redis.call('HSET', KEYS[k], 'token', ARGV[2])
      else
        redis.call('DEL', KEYS[k])
        dropped = dropped + 1
      end
    end
  end
  if dropped > 0 then
    wake_head(KEYS[2], KEYS[3], ARGV[5], tonumber(redis.call('HGET', KEYS[1], 'limit') or '1'))
  end
end
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if last > token or (last == token and redis.call('HGET', KEYS[1], 'token_owner') ~= owner) then
  return {1, last}
end
if token > last then
  redis.call('HSET', KEYS[1], 'token', ARGV[2], 'token_owner', owner)
end
return {0, last}
