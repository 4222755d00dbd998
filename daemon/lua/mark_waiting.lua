-- mark_waiting: show in the record what a live turn is waiting for (SPEC §4.1 `waitingFor`).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker     worker id (fencing)
-- ARGV[2] lease_ms   lease length in milliseconds (renewed here)
-- ARGV[3] reason     'model_slot' (the fleet-wide cap), 'model_retry' (a retry's backoff);
--                    '' clears the field
-- A finished session is never changed: it answers like a lost lease.
-- Safe to run twice: it writes the same field again.
-- Returns {'ok'} | {'lease_lost'}
local status = redis.call('HGET', K.record, 'status')
if not status or not LIVE[status] or not own_lease(ARGV[1], ARGV[2]) then
  return { 'lease_lost' }
end
if ARGV[3] == '' then
  redis.call('HDEL', K.record, 'waitingFor')
else
  redis.call('HSET', K.record, 'waitingFor', ARGV[3])
end
return { 'ok' }
