-- cancel: a coordinator asks a session to stop.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] now          RFC 3339 UTC timestamp
-- ARGV[2] retention_s  seconds every key of the session lives on
-- ARGV[3] interrupts   the Pub/Sub channel of interrupts (Keys.interrupts), or '': a session a
--                      worker runs is announced there (`<sessionId> <turnId>`), so the worker's
--                      listener cuts what runs at once (daemon/bus/session/interruptlistener.py)
-- A queued session that no worker holds (no lease, or only a reaper's mark: its job, when
-- it runs, finds the session finished) ends here and now; any other live session is
-- flagged and its worker stops at the next turn boundary.
-- Returns {'not_found'} | {'finished'} | {'requested'} | {'cancelled', undelivered offsets...}
local status = redis.call('HGET', K.record, 'status')
if not status then
  return { 'not_found' }
end
if not LIVE[status] then
  return { 'finished' }
end
local holder = redis.call('GET', K.lease)
if status == 'queued' and (not holder or is_mark(holder)) then
  return append_all({ 'cancelled' },
    finish_session('cancelled', 'cancelled', 'cancelled while queued', ARGV[1], ARGV[2], 'cancel'))
end
redis.call('HSET', K.record, 'cancelRequested', 1)
if ARGV[3] and ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], redis.call('HGET', K.record, 'sessionId') .. ' '
    .. (redis.call('HGET', K.record, 'turnId') or '0'))
end
return { 'requested' }
