-- take: the idle wait's non-blocking take (README's HTTP API, docs/durability.md "Ambiguous failures").
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- Moves every pending steer in flight and answers EVERY in-flight steer, not only the
-- ones it moved: a steer moved by an earlier run whose reply was lost (or by anything else)
-- is answered again, so no retry can strand a steer. When steers are in flight the session
-- is `running` again (the next turn starts with them).
-- cursor: the id of the journal's newest entry ('0-0' when empty). The caller blocks with
-- XREAD on the journal after it (read-only, safe to repeat): every steer accepted later
-- adds an entry (accept.lua), so the wait wakes for it; one XREAD can wait on the
-- journals of many sessions at once.
-- Returns {'ok', cancelRequested, cursor, inflight JSON...} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
move_pending_to_inflight()
if redis.call('LLEN', K.inflight) > 0 then
  redis.call('HSET', K.record, 'status', 'running')
end
local newest = redis.call('XREVRANGE', K.journal, '+', '-', 'COUNT', 1)
local cursor = '0-0'
if newest[1] then
  cursor = newest[1][1]
end
return append_inflight({ 'ok', redis.call('HGET', K.record, 'cancelRequested') or '0', cursor })
