-- emit: append events of the running attempt to the session's event stream, fenced.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4..]  event JSON each, in order (field `data` of one stream entry each)
-- SPEC §6 v3: an event is appended only while the attempt may still write — the fence
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
local closing = state[1] and not LIVE[state[1]] and state[2] == ARGV[2] and state[3] == ARGV[1]
  and cjson.decode(ARGV[#ARGV])['kind'] == 'session_completed'
if not closing then
  local refused = fence()
  if refused then
    return refused
  end
end
for i = 4, #ARGV do
  redis.call('XADD', K.events, '*', 'data', ARGV[i])
  if cjson.decode(ARGV[i])['kind'] == 'session_completed' then
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
return { 'ok' }
