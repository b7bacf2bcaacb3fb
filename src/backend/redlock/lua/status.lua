-- Reads who holds a name on ONE master and who waits for it there, in one consistent view, with
-- the ids the client needs to match the same holder or waiter across masters. Read-only.
--
-- KEYS: 1 beats zset, 2 readers zset, 3 rinfo hash, 4 queue zset, 5 qinfo hash, 6 .. slot
-- hashes 0 .. limit-1.
-- Returns {{{waiter id, ticket, record}, ...} in line order, {{holder id, slot, token, record,
-- ms left}, ...}}; tickets and tokens as text (exact integers).
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local holders = {}
for k = 6, #KEYS do
  local fields = redis.call('HMGET', KEYS[k], 'owner', 'token', 'info')
  local left = redis.call('PTTL', KEYS[k])
  if fields[1] and left ~= -2 then
    holders[#holders + 1] = {fields[1], k - 6, fields[2] or '0', fields[3] or '', left}
  end
end
local readers = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', now_ms), '+inf', 'WITHSCORES')
for i = 1, #readers, 2 do
  local stored = redis.call('HGET', KEYS[3], readers[i]) or '0|'
  local bar = string.find(stored, '|', 1, true) or (#stored + 1)
  holders[#holders + 1] = {readers[i], 0, string.sub(stored, 1, bar - 1), string.sub(stored, bar + 1),
    tonumber(readers[i + 1]) - now_ms}
end
local waiting = {}
local line = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
for i = 1, #line, 2 do
  local beat = redis.call('ZSCORE', KEYS[1], line[i])
  if beat and tonumber(beat) >= now_ms then
    waiting[#waiting + 1] = {line[i], string.format('%d', tonumber(line[i + 1])),
      redis.call('HGET', KEYS[5], line[i]) or ''}
  end
end
return {waiting, holders}
