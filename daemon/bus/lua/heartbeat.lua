-- heartbeat: renew the lease of a running session, from a thread beside the model call.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- A lapsed lease that nobody took is taken again (the attempt is still the current one).
-- It also answers whether a cancel was requested and how many steers are pending or in
-- flight, so an idle wait learns in one round trip whether to stop or to take steers
-- (including steers some lost reply left in flight). Many sessions' heartbeats can share
-- one pipelined round trip.
-- interruptTurn: the live turn when an interrupt steer waits for it (accept.lua), else 0:
-- the safety net under the Pub/Sub announcement, which a listener can miss.
-- Returns {'ok', cancelRequested, steers, interruptTurn} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
local state = redis.call('HMGET', K.record, 'cancelRequested', 'interruptTurn', 'turnId')
local interrupt = 0
if state[2] and state[2] == state[3] then
  interrupt = tonumber(state[2])
end
return { 'ok', state[1] or '0', redis.call('LLEN', K.pending) + redis.call('LLEN', K.inflight), interrupt }
