-- heartbeat: renew the lease of a running session, from a thread beside the model call.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- A lapsed lease that nobody took is taken again (the attempt is still the current one).
-- It also answers whether a cancel was requested and how many steers are pending or in
-- flight, so an idle wait learns in one round trip whether to stop or to take steers
-- (including steers some lost reply left in flight). Many sessions' heartbeats can share
-- one pipelined round trip.
-- Returns {'ok', cancelRequested, steers} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
return { 'ok', redis.call('HGET', K.record, 'cancelRequested') or '0',
  redis.call('LLEN', K.pending) + redis.call('LLEN', K.inflight) }
