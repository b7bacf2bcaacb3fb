-- --min-interval: records that a name runs now, by the server's clock, unless it was recorded
-- less than the interval ago. A clock that went backwards counts as too soon, never as a free
-- pass.
--
-- KEYS: 1 meta hash. ARGV: 1 interval in microseconds; 2 '1' to record, '0' only to look.
-- Returns {1, 0} when claimed (or, only looking, when it would be); {0, microseconds since the
-- last run} otherwise.
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local last = redis.call('HGET', KEYS[1], 'last_run')
if last then
  local ago = now_us - tonumber(last)
  if ago < tonumber(ARGV[1]) then
    return {0, math.max(ago, 0)}
  end
end
if ARGV[2] == '0' then
  return {1, 0}
end
redis.call('HSET', KEYS[1], 'last_run', string.format('%d', now_us))
return {1, 0}
