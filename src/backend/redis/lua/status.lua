-- Reads who holds a name and who waits for it, in one consistent view.
--
-- KEYS: 1 beats zset, 2 readers zset, 3 rinfo hash, 4 queue zset, 5 qinfo hash, 6 .. slot
-- hashes 0 .. limit-1.
-- Returns {{waiter record, ...} in line order, {{slot, token, record, ms left}, ...}}; tokens
-- are text (exact integers).
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local holders = {}
for k = 6, #KEYS do
  local fields = redis.call('HMGET', KEYS[k], 'token', 'info')
  local left = redis.call('PTTL', KEYS[k])
  if fields[1] and left ~= -2 then
    holders[#holders + 1] = {k - 6, fields[1], fields[2] or '', left}
  end
end
local readers = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', now_ms), '+inf', 'WITHSCORES')
for i = 1, #readers, 2 do
  local stored = redis.call('HGET', KEYS[3], readers[i]) or '0|'
  local bar = string.find(stored, '|', 1, true) or (#stored + 1)
  holders[#holders + 1] = {0, string.sub(stored, 1, bar - 1), string.sub(stored, bar + 1),
    tonumber(readers[i + 1]) - now_ms}
end
local waiting = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  local beat = redis.call('ZSCORE', KEYS[1], id)
  if beat and tonumber(beat) >= now_ms then
    waiting[#waiting + 1] = redis.call('HGET', KEYS[5], id) or ''
  end
end
return {waiting, holders}
