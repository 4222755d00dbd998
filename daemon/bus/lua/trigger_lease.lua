-- trigger_lease: take or renew the poll lease of one trigger (README's Triggers: one poller
-- per trigger fleet-wide). Free, expired or already ours: it is ours for ttl_ms more.
-- KEYS[1] poller   string with PX TTL: the holder (`host:pid:random`)
-- ARGV[1] holder   who asks
-- ARGV[2] ttl_ms   how long the lease lasts unless renewed
-- Returns {1, holder} when held by the asker now, {0, the other holder} otherwise.
local current = redis.call('GET', KEYS[1])
if current == false or current == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return { 1, ARGV[1] }
end
return { 0, current }
