-- Extends a shared hold, only this run's own and only while it has not run out: an expired hold
-- stays gone.
--
-- KEYS: 1 readers zset. ARGV: 1 owner id, 2 ttl ms. Returns 1 when extended, 0 otherwise.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now_ms then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now_ms + tonumber(ARGV[2])), ARGV[1])
  return 1
end
return 0
