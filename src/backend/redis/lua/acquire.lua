-- Takes a slot of a lease if one is free and it is this caller's turn; otherwise (when waiting)
-- keeps the caller in line.
--
-- KEYS[1] meta hash, KEYS[2] queue zset (id -> ticket), KEYS[3] beats zset (id -> heartbeat
-- deadline, server ms), KEYS[4 ..] slot hashes 0 .. limit-1.
-- ARGV[1] owner id, ARGV[2] ttl ms, ARGV[3] limit, ARGV[4] holder JSON, ARGV[5] heartbeat ms
-- (0: try once, do not queue).
--
-- Returns {1, token, slot} when taken; {0, place in line, shortest lease left in ms or -1}
-- otherwise. Every number is an integer: Lua numbers are doubles, exact below 2^53, and are only
-- turned into text with string.format('%d'), never tostring (which would print 1.7e+15).
if redis.replicate_commands then
  redis.replicate_commands()
end
local meta, queue, beats = KEYS[1], KEYS[2], KEYS[3]
local owner = ARGV[1]
local limit = tonumber(ARGV[3])
local heartbeat = tonumber(ARGV[5])

local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)

-- Waiters whose heartbeat lapsed have gone away: they leave the line.
local cutoff = '(' .. string.format('%d', now_ms)
local gone = redis.call('ZRANGEBYSCORE', beats, '-inf', cutoff)
for _, id in ipairs(gone) do
  redis.call('ZREM', queue, id)
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', beats, '-inf', cutoff)
end

local free = {}
local soonest = -1
for k = 1, limit do
  local left = redis.call('PTTL', KEYS[3 + k])
  if left == -2 then
    free[#free + 1] = k - 1
  elseif left >= 0 and (soonest < 0 or left < soonest) then
    soonest = left
  end
end

-- First come, first served: only the first #free in line (or a newcomer when fewer wait) may take
-- a slot.
local rank = redis.call('ZRANK', queue, owner)
local place = rank
if not rank then
  place = redis.call('ZCARD', queue)
end

if place < #free then
  local slot = free[1]
  local last = tonumber(redis.call('HGET', meta, 'token') or '0')
  -- Floored by the server's clock, so tokens keep rising after a restart that lost every key.
  local token = math.max(last + 1, now_us)
  local token_text = string.format('%d', token)
  redis.call('HSET', meta, 'token', token_text)
  local known = tonumber(redis.call('HGET', meta, 'limit') or '0')
  if limit > known then
    redis.call('HSET', meta, 'limit', ARGV[3])
  end
  local key = KEYS[4 + slot]
  redis.call('HSET', key, 'owner', owner, 'token', token_text, 'limit', ARGV[3], 'info', ARGV[4])
  redis.call('PEXPIRE', key, ARGV[2])
  if rank then
    redis.call('ZREM', queue, owner)
    redis.call('ZREM', beats, owner)
  end
  return {1, token, slot}
end

if heartbeat > 0 then
  if not rank then
    local ticket = redis.call('HINCRBY', meta, 'arrivals', 1)
    redis.call('ZADD', queue, ticket, owner)
  end
  redis.call('ZADD', beats, string.format('%d', now_ms + heartbeat), owner)
else
  place = -1
end
return {0, place, soonest}
