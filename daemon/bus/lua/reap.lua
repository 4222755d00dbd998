-- reap: the reaper acts on a live session that no worker holds (daemon/bus/fleet/reaper.py decides).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] reaper    reaper id (written into its `reaper:` mark)
-- ARGV[2] mark_ms   how long the mark lives
-- ARGV[3] action    'requeue' | 'watch'
-- ARGV[4] attempt   the record's `attempt` the reaper saw ('' for none)
-- ARGV[5] jobs      the record's `jobs` the reaper saw ('' for none)
-- The reaper decided from a read of the session and of RQ's keys; this re-checks, in one
-- step, that nothing changed since (still live, still no lease, same attempt and job), so
-- a claim that came in between wins and the reaper does nothing.
--   requeue: the session's next job number is counted and marked pending, and a `reaper:`
--            mark holds the lease's place for `mark_ms` (no second pass enqueues again
--            meanwhile; once the job waits in the queue, the reaper sees it there). The
--            caller enqueues that job (daemon.bus.jobspec.job_id).
--   watch:   the pending job was taken from the queue but has not claimed the session: a
--            `reaper:watch` mark gives its worker `mark_ms` to claim (claim.lua accepts a
--            mark); a session still unclaimed after that is requeued by a later pass.
-- Returns {'requeued', job number} | {'watching'} | {'changed'}
local state = redis.call('HMGET', K.record, 'status', 'attempt', 'jobs')
if not state[1] or not LIVE[state[1]] or redis.call('EXISTS', K.lease) == 1 then
  return { 'changed' }
end
if (state[2] or '') ~= ARGV[4] or (state[3] or '') ~= ARGV[5] then
  return { 'changed' }
end
if ARGV[3] == 'watch' then
  redis.call('SET', K.lease, REAPER_MARK .. 'watch:' .. ARGV[1], 'PX', ARGV[2])
  redis.call('HSET', K.record, 'watchedJob', state[3] or '1')
  return { 'watching' }
end
redis.call('SET', K.lease, REAPER_MARK .. ARGV[1], 'PX', ARGV[2])
redis.call('HSETNX', K.record, 'jobs', 1)  -- a session registered without a count had job 1
redis.call('HDEL', K.record, 'watchedJob')
redis.call('HSET', K.record, 'jobPending', 1)
return { 'requeued', redis.call('HINCRBY', K.record, 'jobs', 1) }
