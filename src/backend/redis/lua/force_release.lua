-- Break-glass: drops every holder of a name. The token counter (in the meta hash) is untouched.
--
-- KEYS[1 ..] slot hashes. ARGV[1] channel. Returns how many holders were dropped.
local dropped = 0
for _, key in ipairs(KEYS) do
  dropped = dropped + redis.call('DEL', key)
end
if dropped > 0 then
  redis.call('PUBLISH', ARGV[1], 'released')
end
return dropped
