-- A round of tries that did not win a quorum: drops whatever this caller holds on this master
-- (holds that, alone, would only block others), and, when it waits, puts it back in line at its
-- agreed ticket, so it keeps its place; then wakes whoever's turn it may now be (possibly this
-- caller itself). Prefixed with the Redis backend's wake.lua and drop_holds.lua.
--
-- KEYS: as acquire.lua: 1 meta, 2 queue, 3 beats, 4 xqueue, 5 squeue, 6 qinfo, 7 readers,
-- 8 rinfo, 9 .. slot hashes. ARGV: 1 owner id, 2 record JSON, 3 heartbeat ms (0: not waiting),
-- 4 mode ('x' or 's'), 5 '1' for --supersede, 6 wake channel prefix, 7 agreed ticket (0: none
-- yet).
-- Returns the caller's ticket here (0 when not in line).
local meta, queue, beats, xqueue, squeue, qinfo, readers, rinfo =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local owner = ARGV[1]
local heartbeat = tonumber(ARGV[3])
local agreed = tonumber(ARGV[7])
if heartbeat > 0 then
  may_publish(ARGV[6])
else
  may_wake(queue, ARGV[6])
end
local function int(n) return string.format('%d', n) end
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)

local dropped = drop_holds(owner, readers, rinfo)

local ticket = redis.call('ZSCORE', queue, owner)
ticket = ticket and tonumber(ticket)
if heartbeat > 0 then
  if not ticket then
    local arrivals = tonumber(redis.call('HGET', meta, 'arrivals') or '0')
    if agreed > 0 then
      ticket = agreed
    else
      ticket = math.max(arrivals + 1, now_us)
    end
    if ticket > arrivals then
      redis.call('HSET', meta, 'arrivals', int(ticket))
    end
    redis.call('ZADD', queue, int(ticket), owner)
    if ARGV[4] ~= 's' then
      redis.call('ZADD', xqueue, int(ticket), owner)
    end
    redis.call('HSET', qinfo, owner, ARGV[2])
    if ARGV[5] == '1' then
      redis.call('ZADD', squeue, int(ticket), owner)
      if ticket > tonumber(redis.call('HGET', meta, 'sup_ticket') or '0') then
        redis.call('HSET', meta, 'sup_ticket', int(ticket), 'sup_owner', owner)
      end
    end
  end
  redis.call('ZADD', beats, int(now_ms + heartbeat), owner)
end
if dropped > 0 then
  wake_head(queue, xqueue, ARGV[6], tonumber(redis.call('HGET', meta, 'limit') or '1'))
end
return ticket or 0
