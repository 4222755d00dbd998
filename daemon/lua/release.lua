-- release: a worker that is shutting down hands its session over without waiting for the
-- lease to expire. The lease becomes a `reaper:` mark, which any worker's claim accepts,
-- and the caller enqueues a resume job.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker     worker id
-- ARGV[2] lease_ms   how long the mark holds off the reaper
-- Returns 1 when released, 0 when the lease was not ours.
if redis.call('GET', K.lease) ~= ARGV[1] then
  return 0
end
redis.call('SET', K.lease, REAPER_MARK .. ARGV[1], 'PX', ARGV[2])
-- handedOver: the next claim tells its agent the session moved cleanly (no lost turn)
redis.call('HSET', K.record, 'turnId', 0, 'handedOver', 1)
return 1
