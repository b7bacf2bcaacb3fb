-- Shared by the scripts that free a place (they are prefixed with this file): wakes only the
-- waiters whose turn it may now be, each on its own channel, never the whole line — the first
-- `free` waiters (at least one) when the head of the line is exclusive, or the run of shared
-- waiters at the head (they may all enter together).
local function wake_head(queue, xqueue, prefix, free)
  local first = redis.call('ZRANGE', queue, 0, 0)
  if #first == 0 then
    return
  end
  if redis.call('ZSCORE', xqueue, first[1]) then
    for _, id in ipairs(redis.call('ZRANGE', queue, 0, math.max(free, 1) - 1)) do
      redis.call('PUBLISH', prefix .. id, 'turn')
    end
    return
  end
  local start = 0
  while true do
    local ids = redis.call('ZRANGE', queue, start, start + 63)
    if #ids == 0 then
      return
    end
    for _, id in ipairs(ids) do
      if redis.call('ZSCORE', xqueue, id) then
        return
      end
      redis.call('PUBLISH', prefix .. id, 'turn')
    end
    start = start + 64
  end
end

