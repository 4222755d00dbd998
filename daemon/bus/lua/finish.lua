-- finish: the worker ends its session.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] status       completed | failed | cancelled
-- ARGV[5] outcome      outcome reason word (workflow_complete, incomplete, max_turns, ...)
-- ARGV[6] detail       human sentence, may be ''
-- ARGV[7] now          RFC 3339 UTC timestamp
-- ARGV[8] retention_s  seconds every key of the session lives on
-- Safe to run twice: a session this very attempt finished answers the undelivered offsets
-- the first run recorded, and writes nothing (a finished session never changes again).
-- Returns {'ok', undelivered offsets...} | {'fenced', reason}
local state = redis.call('HMGET', K.record, 'status', 'attempt', 'endedBy', 'undelivered')
if state[1] and not LIVE[state[1]] and state[2] == ARGV[2] and state[3] == ARGV[1] then
  return append_all({ 'ok' }, cjson.decode(state[4] or '[]'))
end
local refused = fence()
if refused then
  return refused
end
return append_all({ 'ok' }, finish_session(ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[1]))
