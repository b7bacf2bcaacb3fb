-- One try on ONE master of a redlock:// set: become a holder of a name there when it is this
-- caller's turn (or keep the hold it already has there), otherwise (when waiting) keep the caller
-- in line. The client counts the grants: a hold is only a hold once a quorum of masters granted it
-- in the same round (see src/backend/redlock/grant.rs).
--
-- The rules are the Redis backend's, first come first served (my_turn, in
-- src/backend/redis/lua/acquire_opening.lua): an exclusive contender takes a free slot when no
-- shared holder remains and fewer waiters are ahead of it than slots are free; a shared contender
-- enters when no exclusive holder holds and no exclusive waiter is ahead of it. What differs:
-- - The place in line is a ticket every master agrees on: a waiter joins a master with the ticket
--   the client passes (ARGV 9), or, before it has one, with this master's proposal
--   max(arrivals + 1, its clock in µs); the client then takes the largest proposal as its ticket
--   and passes it on every later try, which moves it there on each master. So all masters order
--   the line the same way, and the head of the line is the head everywhere.
-- - A grant proposes a fencing token: max(counter + 1, this master's clock in µs). The client takes
--   the largest over the quorum and writes it back (fence.lua) before the command starts.
-- - A caller that already holds here (an answer of an earlier round came late) keeps its hold.
--
-- KEYS: 1 meta hash, 2 queue zset (waiter -> ticket), 3 beats zset (waiter -> heartbeat deadline,
-- server ms), 4 xqueue zset (exclusive waiters -> ticket), 5 squeue zset (--supersede waiters ->
-- ticket), 6 qinfo hash (waiter -> its record), 7 readers zset (shared holder -> lease expiry,
-- server ms), 8 rinfo hash (shared holder -> "token|record"), 9 .. slot hashes 0 .. limit-1.
-- ARGV: 1 owner id, 2 ttl ms, 3 limit, 4 record JSON, 5 heartbeat ms (0: try once, never queue),
-- 6 mode ('x' exclusive, 's' shared), 7 '1' for --supersede, 8 wake channel prefix, 9 the agreed
-- ticket (0: none yet), 10 the slot to prefer when free (-1: any).
--
-- Returns {1, token, slot, 0, '', ticket} when granted; {0, 0, shortest lease left in ms or -1,
-- superseded (0/1), the newer waiter's record or '', ticket (0 when not in line)} otherwise.
-- Numbers are integers below 2^53 (µs since 1970 are about 2^51), turned into text only with
-- string.format('%d').
--
-- Prefixed with the Redis backend's acquire_opening.lua, which reads the keys and arguments 1-7
-- and the server's clock, clears lapsed waiters and expired shared holders, and defines
-- out_of_line, holds_left, my_turn and take_hold.
local agreed = tonumber(ARGV[9])
local preferred = tonumber(ARGV[10])

-- This master's token proposal for a grant, recorded as its counter (and who it went to, so that
-- the write-back can tell its own proposal from another acquisition's equal token).
local function propose()
  local last = tonumber(redis.call('HGET', meta, 'token') or '0')
  local token = math.max(last + 1, now_us)
  redis.call('HSET', meta, 'token', int(token), 'token_owner', owner)
  local known = tonumber(redis.call('HGET', meta, 'limit') or '0')
  if limit > known then
    redis.call('HSET', meta, 'limit', ARGV[3])
  end
  return token
end

local ticket = redis.call('ZSCORE', queue, owner)
ticket = ticket and tonumber(ticket)

local function leave_line()
  if ticket then
    out_of_line(owner)
  end
end

-- Already a holder here: the hold is kept (and extended), with a fresh proposal.
if shared then
  if redis.call('ZSCORE', readers, owner) then
    redis.call('ZADD', readers, int(now_ms + ttl), owner)
    local token = propose()
    redis.call('HSET', rinfo, owner, int(token) .. '|' .. ARGV[4])
    leave_line()
    return {1, token, 0, 0, '', ticket or 0}
  end
end
for k = 1, limit do
  local key = KEYS[8 + k]
  if redis.call('HGET', key, 'owner') == owner then
    redis.call('PEXPIRE', key, ARGV[2])
    local token = propose()
    redis.call('HSET', key, 'token', int(token), 'info', ARGV[4])
    leave_line()
    return {1, token, k - 1, 0, '', ticket or 0}
  end
end
local free, soonest, nreaders = holds_left()

local arrivals = tonumber(redis.call('HGET', meta, 'arrivals') or '0')
local function arrived(t)
  if t > arrivals then
    arrivals = t
    redis.call('HSET', meta, 'arrivals', int(t))
  end
end
-- The newest --supersede waiter is the one with the highest ticket (this caller's own record is
-- moved with its ticket, which may go down to the one the masters agreed on); every older one is
-- told.
local function newest_supersede(t)
  local newest = tonumber(redis.call('HGET', meta, 'sup_ticket') or '0')
  if t > newest or redis.call('HGET', meta, 'sup_owner') == owner then
    redis.call('HSET', meta, 'sup_ticket', int(t), 'sup_owner', owner)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', squeue, '-inf', '(' .. int(t))) do
    redis.call('PUBLISH', ARGV[8] .. id, 'superseded')
  end
end

-- Moved to the ticket the client agreed on, so every master orders the line alike.
if agreed > 0 then
  arrived(agreed)
  if ticket and ticket ~= agreed then
    ticket = agreed
    redis.call('ZADD', queue, int(ticket), owner)
    if redis.call('ZSCORE', xqueue, owner) then
      redis.call('ZADD', xqueue, int(ticket), owner)
    end
    if redis.call('ZSCORE', squeue, owner) then
      redis.call('ZADD', squeue, int(ticket), owner)
      newest_supersede(ticket)
    end
  end
end

-- A newer --supersede waiter joined after this one: it gives up.
if ticket and supersede then
  local newest = tonumber(redis.call('HGET', meta, 'sup_ticket') or '0')
  if newest > ticket and redis.call('HGET', meta, 'sup_owner') ~= owner then
    local by = redis.call('HGET', qinfo, redis.call('HGET', meta, 'sup_owner') or '') or ''
    return {0, 0, soonest, 1, by, ticket}
  end
end

local rank = ticket and redis.call('ZRANK', queue, owner)
if my_turn(ticket, rank, free, nreaders) then
  local token = propose()
  local slot = free[1]
  for _, k in ipairs(free) do
    if k == preferred then
      slot = k
    end
  end
  slot = take_hold(token, slot)
  leave_line()
  return {1, token, slot, 0, '', ticket or 0}
end

if heartbeat > 0 then
  if not ticket then
    if agreed > 0 then
      ticket = agreed
    else
      ticket = math.max(arrivals + 1, now_us)
    end
    arrived(ticket)
    redis.call('ZADD', queue, int(ticket), owner)
    if not shared then
      redis.call('ZADD', xqueue, int(ticket), owner)
    end
    redis.call('HSET', qinfo, owner, ARGV[4])
    if supersede then
      redis.call('ZADD', squeue, int(ticket), owner)
      newest_supersede(ticket)
    end
  end
  redis.call('ZADD', beats, int(now_ms + heartbeat), owner)
end
return {0, 0, soonest, 0, '', ticket or 0}
