-- The opening every try to acquire shares, on one Redis server (src/backend/redis/lua/acquire.lua)
-- and on one master of a redlock:// set (src/backend/redlock/lua/acquire.lua), prepended to each:
-- the keys and the arguments both read alike (KEYS and ARGV 1-7 as documented there), the
-- server's clock, the cleanup of waiters whose heartbeat lapsed and of shared holders whose
-- lease ran out, taking a waiter out of the line, what the holds leave free, the rule of whose
-- turn it is, and taking the hold.
if redis.replicate_commands then
  redis.replicate_commands()
end
local meta, queue, beats, xqueue, squeue, qinfo, readers, rinfo =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local owner = ARGV[1]
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local heartbeat = tonumber(ARGV[5])
local shared = ARGV[6] == 's'
local supersede = ARGV[7] == '1'
if supersede then
  may_wake(squeue, ARGV[8])
end

local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)
local function int(n) return string.format('%d', n) end

-- Takes `id` out of the line: its place, its exclusive and --supersede entries, its heartbeat
-- and its record.
local function out_of_line(id)
  redis.call('ZREM', queue, id)
  redis.call('ZREM', xqueue, id)
  redis.call('ZREM', squeue, id)
  redis.call('ZREM', beats, id)
  redis.call('HDEL', qinfo, id)
end

-- Waiters whose heartbeat lapsed have gone away: they leave the line.
local cutoff = '(' .. int(now_ms)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', beats, '-inf', cutoff)) do
  out_of_line(id)
end
-- Shared holders whose lease ran out are gone.
local expired = redis.call('ZRANGEBYSCORE', readers, '-inf', int(now_ms))
for _, id in ipairs(expired) do
  redis.call('HDEL', rinfo, id)
end
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', int(now_ms))
end

-- Whether an exclusive holder holds a slot at or past this caller's limit: one that asked for a
-- larger --limit (the largest is in the meta hash). A shared caller (limit 1) must not enter
-- beside it. Those slots' keys are named as slot 0's (KEYS[9], ending in 0), in the name's hash
-- slot like every key the script touches.
local function held_beyond_limit()
  local known = tonumber(redis.call('HGET', meta, 'limit') or '0')
  local prefix = string.sub(KEYS[9], 1, -2)
  for k = limit, known - 1 do
    if redis.call('EXISTS', prefix .. k) == 1 then
      return true
    end
  end
  return false
end

-- Whether it is this caller's turn to take a hold, first come first served: an exclusive
-- contender takes a free slot when no shared holder remains and fewer waiters are ahead of it
-- than slots are free; a shared contender enters when no exclusive holder holds and no exclusive
-- waiter is ahead of it, so a waiting writer is never starved by readers that came after it.
-- `ticket` and `rank` are the caller's place in line (nil when not in line), `free` the free
-- slots, `nreaders` how many shared holders hold.
local function my_turn(ticket, rank, free, nreaders)
  if shared then
    local writers_ahead
    if ticket then
      writers_ahead = redis.call('ZCOUNT', xqueue, '-inf', '(' .. int(ticket))
    else
      writers_ahead = redis.call('ZCARD', xqueue)
    end
    return #free == limit and writers_ahead == 0 and not held_beyond_limit()
  end
  local place = rank or redis.call('ZCARD', queue)
  return nreaders == 0 and place < #free
end

-- What the holds leave: the free slots (numbered from 0), the shortest lease left in ms over the
-- slots and the shared holders (-1 when none), and how many shared holders hold.
local function holds_left()
  local free = {}
  local soonest = -1
  for k = 1, limit do
    local left = redis.call('PTTL', KEYS[8 + k])
    if left == -2 then
      free[#free + 1] = k - 1
    elseif left >= 0 and (soonest < 0 or left < soonest) then
      soonest = left
    end
  end
  local nreaders = redis.call('ZCARD', readers)
  if nreaders > 0 then
    local first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')
    local left = tonumber(first[2]) - now_ms
    if soonest < 0 or left < soonest then
      soonest = left
    end
  end
  return free, soonest, nreaders
end

-- Takes the hold this caller's turn gives it, with fencing token `token`: a shared hold, or the
-- free exclusive slot `slot`. Returns the slot held (0 for a shared hold).
local function take_hold(token, slot)
  if shared then
    redis.call('ZADD', readers, int(now_ms + ttl), owner)
    redis.call('HSET', rinfo, owner, int(token) .. '|' .. ARGV[4])
    return 0
  end
  local key = KEYS[9 + slot]
  redis.call('HSET', key, 'owner', owner, 'token', int(token), 'limit', ARGV[3], 'info', ARGV[4])
  redis.call('PEXPIRE', key, ARGV[2])
  return slot
end
