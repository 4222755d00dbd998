-- trigger_release: give a poll lease back (a clean stop), only if the asker still holds it.
-- KEYS[1] poller   string with PX TTL: the holder
-- ARGV[1] holder   who gives it back
-- Returns 1 when released, 0 when it was not (or no longer) the asker's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
