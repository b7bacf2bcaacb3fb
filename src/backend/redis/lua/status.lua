-- Reads who holds a name and who waits for it, in one consistent view (after
-- status_opening.lua: the clock, each_slot and each_reader).
--
-- KEYS: as in status_opening.lua.
-- Returns {{waiter record, ...} in line order, {{slot, token, record, ms left}, ...}}; tokens
-- are text (exact integers).
local holders = {}
each_slot({'token', 'info'}, function(slot, values, left)
  holders[#holders + 1] = {slot, values[1], values[2] or '', left}
end)
each_reader(function(_, token, record, left)
  holders[#holders + 1] = {0, token, record, left}
end)
local waiting = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  local beat = redis.call('ZSCORE', KEYS[1], id)
  if beat and tonumber(beat) >= now_ms then
    waiting[#waiting + 1] = redis.call('HGET', KEYS[5], id) or ''
  end
end
return {waiting, holders}
