-- trigger_polled: record one poll of a trigger, fenced by its poll lease (README's Triggers).
-- KEYS[1] poller   string: the lease holder
-- KEYS[2] state    hash: the trigger's state (daemon.bus.fleet.triggers.TriggerState)
-- KEYS[3] etags    hash: request URL -> ETag
-- KEYS[4] seen     sorted set: item versions handled, scored by their updated_at (ms)
-- ARGV[1] holder        the poller that polled
-- ARGV[2] cursor        the provider's timestamp to ask from next time ('' keeps the cursor)
-- ARGV[3] cursor_ms     the same in ms: the cursor only moves forward
-- ARGV[4] etags         JSON {url: etag}; an empty etag forgets the URL's
-- ARGV[5] at            RFC 3339 now (lastPollAt)
-- ARGV[6] next_poll_ms  when the next poll is due (any holder keeps the schedule)
-- ARGV[7] paused_ms     no request before this (the rate limit's reset), 0 for none
-- ARGV[8] result        changed | not_modified | error | rate_limited
-- ARGV[9] error         the poll's error sentence ('' for none)
-- ARGV[10] seen_floor   item versions scored below this leave `seen` (older than the cursor)
-- A poller that lost its lease (frozen, cut off) writes nothing: another one polls now.
-- Returns {'ok'} | {'fenced', the holder or ''}
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  return { 'fenced', holder or '' }
end
if ARGV[2] ~= '' then
  local current = tonumber(redis.call('HGET', KEYS[2], 'cursorMs') or '-1')
  if tonumber(ARGV[3]) > current then
    redis.call('HSET', KEYS[2], 'cursor', ARGV[2], 'cursorMs', ARGV[3])
  end
end
for url, etag in pairs(cjson.decode(ARGV[4])) do
  if etag == '' then
    redis.call('HDEL', KEYS[3], url)
  else
    redis.call('HSET', KEYS[3], url, etag)
  end
end
redis.call('HSET', KEYS[2], 'lastPollAt', ARGV[5], 'nextPollMs', ARGV[6], 'pausedUntilMs', ARGV[7],
  'lastPollResult', ARGV[8])
redis.call('HINCRBY', KEYS[2], 'polls', 1)
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[2], 'lastError', ARGV[9], 'lastErrorAt', ARGV[5])
end
if tonumber(ARGV[10]) > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[10])
end
return { 'ok' }
