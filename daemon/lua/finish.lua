-- finish: the worker ends its session.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker       worker id (fencing)
-- ARGV[2] lease_ms     unused: every fenced script takes (worker, lease_ms) first
-- ARGV[3] status       completed | failed | cancelled
-- ARGV[4] outcome      outcome reason word (workflow_complete, incomplete, max_turns, ...)
-- ARGV[5] detail       human sentence, may be ''
-- ARGV[6] now          RFC 3339 UTC timestamp
-- ARGV[7] retention_s  seconds every key of the session lives on
-- A missing lease (lapsed, nobody took it) still lets its last holder finish.
-- Returns {'ok', undelivered offsets...} | {'lease_lost'}
local holder = redis.call('GET', K.lease)
if holder and holder ~= ARGV[1] then
  return { 'lease_lost' }
end
return append_all({ 'ok' }, finish_session(ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]))
