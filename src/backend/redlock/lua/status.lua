-- Reads who holds a name on ONE master and who waits for it there, in one consistent view, with
-- the ids the client needs to match the same holder or waiter across masters. Read-only. Runs
-- after the Redis backend's status_opening.lua (the clock, each_slot and each_reader).
--
-- KEYS: as in status_opening.lua.
-- Returns {{{waiter id, ticket, record}, ...} in line order, {{holder id, slot, token, record,
-- ms left}, ...}}; tickets and tokens as text (exact integers).
local holders = {}
each_slot({'owner', 'token', 'info'}, function(slot, values, left)
  holders[#holders + 1] = {values[1], slot, values[2] or '0', values[3] or '', left}
end)
each_reader(function(id, token, record, left)
  holders[#holders + 1] = {id, 0, token, record, left}
end)
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
