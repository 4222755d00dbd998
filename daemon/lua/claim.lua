-- claim: a worker takes a session to run it (first start or resume).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker     worker id (unique per attempt)
-- ARGV[2] lease_ms   lease length in milliseconds
-- ARGV[3] now        RFC 3339 UTC timestamp
-- Pending steers move in flight (they go into the first model call of this attempt), so a
-- steer accepted before the first turn reaches the first turn.
-- Safe to run twice: a worker that already holds the lease (the first run's reply was lost
-- and the client ran the script again) gets the same attempt back, not a new one.
-- handedOver: '1' when the previous attempt released the session cleanly (release.lua).
-- Returns {'finished'} | {'leased', holder} |
--         {'ok', attempt, historyLength, cancelRequested, handedOver, inflight JSON...}
local worker, lease_ms, now = ARGV[1], ARGV[2], ARGV[3]

local status = redis.call('HGET', K.record, 'status')
if not status or not LIVE[status] then
  return { 'finished' }
end
-- A reaper marks a session it re-enqueues with a `reaper:` lease: any worker may take it.
local holder = redis.call('GET', K.lease)
if holder and holder ~= worker and string.sub(holder, 1, #REAPER_MARK) ~= REAPER_MARK then
  return { 'leased', holder }
end
redis.call('SET', K.lease, worker, 'PX', lease_ms)
local attempt
local handed_over = '0'
if holder == worker then
  attempt = tonumber(redis.call('HGET', K.record, 'attempt'))
else
  attempt = redis.call('HINCRBY', K.record, 'attempt', 1)
  handed_over = redis.call('HGET', K.record, 'handedOver') or '0'
  redis.call('HDEL', K.record, 'handedOver')
  redis.call('HSET', K.record, 'worker', worker, 'status', 'running', 'turnId', 0)
end
redis.call('HSETNX', K.record, 'startedAt', now)
move_pending_to_inflight()
return append_inflight({ 'ok', attempt, redis.call('LLEN', K.history),
  redis.call('HGET', K.record, 'cancelRequested') or '0', handed_over })
