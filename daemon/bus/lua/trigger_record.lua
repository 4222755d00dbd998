-- trigger_record: what one delivery (a webhook's, or a polled item version's) did, once.
-- For the outcomes that start no session (steered, queued, ignored, error); a started
-- session is recorded inside its dispatch's MULTI (daemon.bus.fleet.triggers.TriggerStore.alongside).
-- KEYS[1] delivery  string: the delivery's record (SET NX: the first outcome stays)
-- KEYS[2] state     hash: the trigger's state
-- KEYS[3] fires     stream: the fire records
-- KEYS[4] queued    list: events waiting for their key's session to end
-- KEYS[5] seen      sorted set: item versions handled
-- ARGV[1] record    the FireRecord JSON
-- ARGV[2] ttl       seconds the delivery record lives (the retention); 0: none is kept (an
--                   error or an event the trigger does not take: a redelivery is judged again)
-- ARGV[3] maxlen    the fires stream's approximate cap
-- ARGV[4] at        RFC 3339 now
-- ARGV[5] result    the record's result
-- ARGV[6] queue     the QueuedEvent JSON to append to `queued`, or '' (not a queue outcome)
-- ARGV[7] seen      `<item id>@<updated_at>` to add to `seen`, or '' (a webhook)
-- ARGV[8] seen_ms   its score
-- ARGV[9] error     the error sentence ('' for none)
-- Returns {'recorded'} | {'duplicate', the first record's JSON}
local first = redis.call('GET', KEYS[1])
if first then
  return { 'duplicate', first }
end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'data', ARGV[1])
redis.call('HINCRBY', KEYS[2], 'fires', 1)
redis.call('HSET', KEYS[2], 'lastFireAt', ARGV[4], 'lastResult', ARGV[5])
if ARGV[6] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[6])
end
if ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[5], ARGV[8], ARGV[7])
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[2], 'lastError', ARGV[9], 'lastErrorAt', ARGV[4])
end
return { 'recorded' }
