-- Shared by the scripts that drop whatever one run holds on a name (they are prefixed with this
-- file): the Redis backend's leave.lua and redlock's retreat.lua. KEYS 9 onward are the slot
-- hashes, as in acquire.lua.
--
-- Drops `owner`'s slots and its shared hold (in `readers`, with its record in `rinfo`); returns
-- how many holds went.
local function drop_holds(owner, readers, rinfo)
  local dropped = 0
  for k = 9, #KEYS do
    if redis.call('HGET', KEYS[k], 'owner') == owner then
      redis.call('DEL', KEYS[k])
      dropped = dropped + 1
    end
  end
  if redis.call('ZREM', readers, owner) == 1 then
    redis.call('HDEL', rinfo, owner)
    dropped = dropped + 1
  end
  return dropped
end
