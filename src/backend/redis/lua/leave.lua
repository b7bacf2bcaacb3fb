-- A waiter that gives up leaves the line, drops a hold that one of its tries took if the answer
-- never reached it, and wakes whoever is next.
--
-- KEYS: 1 meta hash, 2 queue zset, 3 beats zset, 4 xqueue zset, 5 squeue zset, 6 qinfo hash,
-- 7 readers zset, 8 rinfo hash, 9 .. slot hashes. ARGV: 1 owner id, 2 wake channel prefix.
-- Returns how many entries (place in line, holds) were removed. Prefixed with wake.lua and
-- drop_holds.lua.
local owner = ARGV[1]
may_wake(KEYS[2], ARGV[2])
local removed = redis.call('ZREM', KEYS[2], owner)
redis.call('ZREM', KEYS[3], owner)
redis.call('ZREM', KEYS[4], owner)
redis.call('ZREM', KEYS[5], owner)
redis.call('HDEL', KEYS[6], owner)
removed = removed + drop_holds(owner, KEYS[7], KEYS[8])
if removed > 0 then
  wake_head(KEYS[2], KEYS[4], ARGV[2], tonumber(redis.call('HGET', KEYS[1], 'limit') or '1'))
end
return removed
