-- One try to become a holder of a name, in turn; otherwise (when waiting) keeps the caller in line.
--
-- KEYS: 1 meta hash, 2 queue zset (waiter -> ticket), 3 beats zset (waiter -> heartbeat deadline,
-- server ms), 4 xqueue zset (exclusive waiters -> ticket), 5 squeue zset (--supersede waiters ->
-- ticket), 6 qinfo hash (waiter -> its record), 7 readers zset (shared holder -> lease expiry,
-- server ms), 8 rinfo hash (shared holder -> "token|record"), 9 .. slot hashes 0 .. limit-1.
-- ARGV: 1 owner id, 2 ttl ms, 3 limit, 4 record JSON, 5 heartbeat ms (0: try once, never queue),
-- 6 mode ('x' exclusive, 's' shared), 7 '1' for --supersede, 8 wake channel prefix.
--
-- The rules, first come first served, are my_turn's in acquire_opening.lua.
--
-- Returns {1, token, slot, 0, ''} when taken; {0, place in line (-1 when not queued), shortest lease
-- left in ms or -1, superseded (0/1), the newer waiter's record or ''} otherwise. Every number is
-- an integer: Lua numbers are doubles, exact below 2^53, and are only turned into text with
-- string.format('%d'), never tostring (which would print 1.7e+15).
--
-- Prefixed with acquire_opening.lua, which reads the keys and arguments and the server's clock,
-- clears lapsed waiters and expired shared holders, and defines out_of_line, holds_left, my_turn
-- and take_hold.
local free, soonest, nreaders = holds_left()

local rank = redis.call('ZRANK', queue, owner)
local ticket = rank and tonumber(redis.call('ZSCORE', queue, owner))

-- A newer --supersede waiter joined after this one: it gives up.
if rank and supersede then
  local newest = tonumber(redis.call('HGET', meta, 'sup_ticket') or '0')
  if newest > ticket then
    local by = redis.call('HGET', qinfo, redis.call('HGET', meta, 'sup_owner') or '') or ''
    return {0, rank, soonest, 1, by}
  end
end

if my_turn(ticket, rank, free, nreaders) then
  local last = tonumber(redis.call('HGET', meta, 'token') or '0')
  -- Floored by the server's clock, so tokens keep rising after a restart that lost every key.
  local token = math.max(last + 1, now_us)
  redis.call('HSET', meta, 'token', int(token))
  local known = tonumber(redis.call('HGET', meta, 'limit') or '0')
  if limit > known then
    redis.call('HSET', meta, 'limit', ARGV[3])
  end
  local slot = take_hold(token, free[1])
  if rank then
    out_of_line(owner)
  end
  return {1, token, slot, 0, ''}
end

if heartbeat > 0 then
  if not rank then
    ticket = redis.call('HINCRBY', meta, 'arrivals', 1)
    redis.call('ZADD', queue, ticket, owner)
    if not shared then
      redis.call('ZADD', xqueue, ticket, owner)
    end
    redis.call('HSET', qinfo, owner, ARGV[4])
    if supersede then
      -- Every older --supersede waiter gives up: wake each to find out.
      local older = redis.call('ZRANGE', squeue, 0, -1)
      redis.call('ZADD', squeue, ticket, owner)
      redis.call('HSET', meta, 'sup_ticket', ticket, 'sup_owner', owner)
      for _, id in ipairs(older) do
        redis.call('PUBLISH', ARGV[8] .. id, 'superseded')
      end
    end
    rank = redis.call('ZCARD', queue) - 1
  end
  redis.call('ZADD', beats, int(now_ms + heartbeat), owner)
else
  rank = -1
end
return {0, rank, soonest, 0, ''}
