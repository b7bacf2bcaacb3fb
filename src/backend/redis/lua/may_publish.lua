-- Shared by every script that may PUBLISH (prefixed to the scripts that free a place and to the
-- acquire opening, here and on a redlock master): a Redis user whose ACL forbids publishing on
-- lockrun's channels is refused before the script writes anything. Redis does not roll a failed
-- script back, so a script stopped by PUBLISH half-way would keep its writes: a release would
-- take effect and still be reported as failed. A server before 7.0 has no redis.acl_check_cmd
-- (nor channel permissions before 6.2): there the check is skipped.
local function may_publish(prefix)
  if redis.acl_check_cmd and not redis.acl_check_cmd('PUBLISH', prefix .. '-', '') then
    error({err = 'NOPERM this Redis user may not PUBLISH to ' .. prefix .. '*, where lockrun '
      .. 'tells waiters and holders'})
  end
end

-- `may_publish`, when the line `queue` has someone to wake.
local function may_wake(queue, prefix)
  if redis.call('EXISTS', queue) == 1 then
    may_publish(prefix)
  end
end

