-- claim: a worker takes a session to run it (first start or resume); assigns the fencing token.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker     worker id (unique per attempt)
-- ARGV[2] lease_ms   lease length in milliseconds
-- ARGV[3] now        RFC 3339 UTC timestamp
-- A new claim counts the record's `attempt` up: that number is the attempt's fencing token,
-- which every later worker-side script checks (_common.lua `fence`), so every earlier
-- attempt is refused from here on, whether or not its lease key still exists.
-- Pending steers move in flight (they go into the first model call of this attempt), so a
-- steer accepted before the first turn reaches the first turn. The session's pending job
-- is consumed (`jobPending` cleared: the reaper stops watching for it).
-- Safe to run twice: a worker that already holds the lease (the first run's reply was lost
-- and the client ran the script again) gets the same attempt back, not a new one.
-- handedOver: '1' when the previous attempt released the session cleanly (release.lua).
-- receipt: the `steer_delivered` the previous attempt journalled but never confirmed it
-- emitted ({"turnId", "offsets"} JSON, or ''): this attempt emits it.
-- Returns {'finished'} | {'leased', holder} |
--         {'ok', attempt, historyLength, cancelRequested, handedOver, receipt, inflight JSON...}
local worker, lease_ms, now = ARGV[1], ARGV[2], ARGV[3]

local status = redis.call('HGET', K.record, 'status')
if not status or not LIVE[status] then
  return { 'finished' }
end
-- A reaper marks a session it re-enqueues with a `reaper:` lease: any worker may take it.
local holder = redis.call('GET', K.lease)
if holder and holder ~= worker and not is_mark(holder) then
  return { 'leased', holder }
end
redis.call('SET', K.lease, worker, 'PX', lease_ms)
local attempt
local handed_over = '0'
if holder == worker then
  attempt = tonumber(redis.call('HGET', K.record, 'attempt'))
  handed_over = redis.call('HGET', K.record, 'claimHandedOver') or '0'
else
  attempt = redis.call('HINCRBY', K.record, 'attempt', 1)
  handed_over = redis.call('HGET', K.record, 'handedOver') or '0'
  redis.call('HDEL', K.record, 'handedOver', 'jobPending', 'watchedJob')
  redis.call('HSET', K.record, 'worker', worker, 'status', 'running', 'turnId', 0,
    'claimHandedOver', handed_over)
end
redis.call('HSETNX', K.record, 'startedAt', now)
move_pending_to_inflight()
return append_inflight({ 'ok', attempt, redis.call('LLEN', K.history),
  redis.call('HGET', K.record, 'cancelRequested') or '0', handed_over,
  redis.call('HGET', K.record, 'receipt') or '' })
