-- The opening both status reads share, on one Redis server (src/backend/redis/lua/status.lua)
-- and on one master of a redlock:// set (src/backend/redlock/lua/status.lua), prepended to each:
-- the server's clock, and walks over the live holders, which each script adds to its reply in
-- its own format.
--
-- KEYS: 1 beats zset, 2 readers zset, 3 rinfo hash, 4 queue zset, 5 qinfo hash, 6 .. slot
-- hashes 0 .. limit-1.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Calls visit(slot, values, ms left) for each slot hash that is still there and has the first
-- of `fields`; `values` are the hash's `fields`, in that order.
local function each_slot(fields, visit)
  for k = 6, #KEYS do
    local values = redis.call('HMGET', KEYS[k], unpack(fields))
    local left = redis.call('PTTL', KEYS[k])
    if values[1] and left ~= -2 then
      visit(k - 6, values, left)
    end
  end
end

-- Calls visit(reader id, token, record, ms left) for each shared holder whose lease runs.
local function each_reader(visit)
  local readers = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', now_ms), '+inf', 'WITHSCORES')
  for i = 1, #readers, 2 do
    local stored = redis.call('HGET', KEYS[3], readers[i]) or '0|'
    local bar = string.find(stored, '|', 1, true) or (#stored + 1)
    visit(readers[i], string.sub(stored, 1, bar - 1), string.sub(stored, bar + 1),
      tonumber(readers[i + 1]) - now_ms)
  end
end
