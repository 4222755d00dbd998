-- finish: the worker ends its session.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker       worker id (fencing)
-- ARGV[2] status       completed | failed | cancelled
-- ARGV[3] outcome      outcome reason word (workflow_complete, incomplete, max_turns, ...)
-- ARGV[4] detail       human sentence, may be ''
-- ARGV[5] now          RFC 3339 UTC timestamp
-- ARGV[6] retention_s  seconds every key of the session lives on
-- Returns {'ok', undelivered offsets...} | {'lease_lost'}
local holder = redis.call('GET', K.lease)
if holder and holder ~= ARGV[1] then
  return { 'lease_lost' }
end
local reply = { 'ok' }
for _, offset in ipairs(finish_session(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])) do
  reply[#reply + 1] = offset
end
return reply
