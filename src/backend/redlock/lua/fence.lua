-- The write-back of a fencing token, on ONE master: stamps the caller's hold here with the token the
-- client chose (the largest its quorum proposed), and raises this master's counter to it — unless
-- this master has already seen that token or a larger one (from another acquisition, or a
-- proposal of its own that the client did not wait for), which a quorum of others must then
-- accept, or the client outbid. Holds the caller has here in another slot than the agreed one are
-- dropped (the grants of one round may have named different slots), and so is its place in line:
-- a master that did not grant it in the winning round still has it waiting, and a holder left at
-- the head of a line would hold up everyone behind it there until its heartbeat lapsed. Prefixed
-- with the Redis backend's wake.lua. Why this makes tokens strictly rise:
-- src/backend/redlock/fence.rs.
--
-- KEYS: as acquire.lua: 1 meta, 2 queue, 3 beats, 4 xqueue, 5 squeue, 6 qinfo, 7 readers,
-- 8 rinfo, 9 .. slot hashes 0 .. limit-1 (none for a shared hold). ARGV: 1 owner id, 2 token,
-- 3 mode ('x' or 's'), 4 the agreed slot, 5 wake channel prefix.
-- Returns {0, counter before} when written; {1, counter} when the token is not above what this
-- master has seen.
local meta, queue, beats, xqueue, squeue, qinfo, readers, rinfo =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local owner = ARGV[1]
may_wake(queue, ARGV[5])
local token = tonumber(ARGV[2])
local holds = false
local freed = 0
-- The caller's hold here carries the token (for status), whatever this master's counter says.
if ARGV[3] == 's' then
  local stored = redis.call('HGET', rinfo, owner)
  if stored then
    local bar = string.find(stored, '|', 1, true) or 0
    redis.call('HSET', rinfo, owner, ARGV[2] .. '|' .. string.sub(stored, bar + 1))
    holds = true
  end
else
  local slot = tonumber(ARGV[4])
  for k = 9, #KEYS do
    if redis.call('HGET', KEYS[k], 'owner') == owner then
      if k - 9 == slot then
        redis.call('HSET', KEYS[k], 'token', ARGV[2])
        holds = true
      else
        redis.call('DEL', KEYS[k])
        freed = freed + 1
      end
    end
  end
end
-- No longer waiting here.
if redis.call('ZREM', queue, owner) == 1 then
  redis.call('ZREM', xqueue, owner)
  redis.call('ZREM', squeue, owner)
  redis.call('ZREM', beats, owner)
  redis.call('HDEL', qinfo, owner)
  if not holds then
    freed = freed + 1
  end
end
if freed > 0 then
  wake_head(queue, xqueue, ARGV[5], tonumber(redis.call('HGET', meta, 'limit') or '1'))
end
local last = tonumber(redis.call('HGET', meta, 'token') or '0')
if last > token or (last == token and redis.call('HGET', meta, 'token_owner') ~= owner) then
  return {1, last}
end
if token > last then
  redis.call('HSET', meta, 'token', ARGV[2], 'token_owner', owner)
end
return {0, last}
