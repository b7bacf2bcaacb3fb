-- Reads who holds a name, and how many wait, in one consistent view.
--
-- KEYS[1] beats zset, KEYS[2 ..] slot hashes 0 .. limit-1.
-- Returns {waiters, {{slot, token, info, ms left}, ...}}; token is text (an exact integer).
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local waiters = redis.call('ZCOUNT', KEYS[1], string.format('%d', now_ms), '+inf')
local holders = {}
for k = 2, #KEYS do
  local fields = redis.call('HMGET', KEYS[k], 'token', 'info')
  local left = redis.call('PTTL', KEYS[k])
  if fields[1] and left ~= -2 then
    holders[#holders + 1] = {k - 2, fields[1], fields[2] or '', left}
  end
end
return {waiters, holders}
