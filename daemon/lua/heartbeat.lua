-- heartbeat: renew the lease of a running session, from a thread beside the model call.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker     worker id
-- ARGV[2] lease_ms   lease length in milliseconds
-- It also answers whether a cancel was requested, so a waiting agent learns both in one
-- round trip.
-- Returns {owned, cancelRequested}: owned 1 when the lease is ours (renewed, or re-taken
-- after a lapse nobody used), 0 when another worker holds it (this worker must stop: it is
-- fenced); cancelRequested '1' or '0'.
local owned = 0
if own_lease(ARGV[1], ARGV[2]) then
  owned = 1
end
return { owned, redis.call('HGET', K.record, 'cancelRequested') or '0' }
