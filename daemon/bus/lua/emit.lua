-- emit: append events of the running attempt to the session's event stream, fenced.
-- KEYS: the eight session keys (see _common.lua).
--   KEYS[9..12] the webhook keys (daemon.bus.keys.WebhookKeys deliveries, due, log, and
--   the session's list `webhooks_of`): needed only when ARGV[4] queues deliveries. The first
--   three share the `{webhooks}` slot, not the session's: on a Redis Cluster this script
--   would be cross-slot (WorkTrain connects to one primary, through Sentinel or not).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4]    the webhook deliveries these events ask for (README's Webhooks), JSON
--            {"ttl": seconds the session's list lives, "items": [{"id", "due" (ms), "record"
--            (the delivery's JSON)}, ...]} or '' for none: queued here, with the events or
--            not at all (no event without its webhooks, none for a refused attempt)
-- ARGV[5..]  event JSON each, in order (field `data` of one stream entry each)
-- docs/durability.md: an event is appended only while the attempt may still write — the fence
-- lets it through — or, once it finished the session itself (finish.lua: the record's
-- attempt and endedBy are this attempt's), its closing batch: the events held until then
-- and `steer_undelivered`, ending with `session_completed`. Nothing is ever
-- appended after `session_completed` (the record's `closed` says one was): a stale
-- attempt's late events, or a second run of this script, are refused and write nothing.
-- The global stream `wt:events` is not written here (another slot): the caller adds the
-- events there once this script has accepted them.
-- Returns {'ok'} | {'fenced', reason}
local state = redis.call('HMGET', K.record, 'status', 'attempt', 'endedBy', 'closed')
if state[4] == '1' then
  return { 'fenced', 'finished' }
end
-- the closing batch of the attempt that finished the session: it ends with session_completed
-- (an event's kind, found without decoding the event: a quote inside a string value is escaped)
local COMPLETED = '"kind"%s*:%s*"session_completed"'
local closing = state[1] and not LIVE[state[1]] and state[2] == ARGV[2] and state[3] == ARGV[1]
  and string.find(ARGV[#ARGV], COMPLETED) ~= nil
if not closing then
  local refused = fence()
  if refused then
    return refused
  end
end
for i = 5, #ARGV do
  redis.call('XADD', K.events, '*', 'data', ARGV[i])
  if string.find(ARGV[i], COMPLETED) then
    redis.call('HSET', K.record, 'closed', 1)
  end
end
if closing and redis.call('TTL', K.events) == -1 then
  -- a stream the finish did not find (no event yet) expires with the rest of the session
  local ttl = redis.call('TTL', K.record)
  if ttl > 0 then
    redis.call('EXPIRE', K.events, ttl)
  end
end
if ARGV[4] ~= '' then
  local queued = cjson.decode(ARGV[4])
  for _, item in ipairs(queued['items']) do
    -- a second run (a lost reply retried) carries the same ids: queued once
    if redis.call('HSETNX', KEYS[9], item['id'], item['record']) == 1 then
      redis.call('ZADD', KEYS[10], item['due'], item['id'])
      redis.call('ZADD', KEYS[11], item['due'], item['id'])
      redis.call('RPUSH', KEYS[12], item['id'])
    end
  end
  redis.call('EXPIRE', KEYS[12], queued['ttl'])
end
return { 'ok' }
