-- release: a worker that is shutting down hands its session over without waiting for the
-- lease to expire. The lease becomes a `reaper:` mark, which any worker's claim accepts,
-- and the session gets its next job number, which the caller enqueues (daemon.bus.jobspec).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence; lease_ms is how long the mark holds the
--            reaper off)
-- Safe to run twice: a second run by the same attempt finds its own mark and answers the
-- same job number, enqueueing nothing new.
-- Returns {'ok', job number} | {'fenced', reason}
local mine = REAPER_MARK .. ARGV[1]
if redis.call('GET', K.lease) == mine then
  local state = redis.call('HMGET', K.record, 'status', 'attempt', 'worker', 'jobs')
  if state[1] and LIVE[state[1]] and state[2] == ARGV[2] and state[3] == ARGV[1] then
    return { 'ok', tonumber(state[4]) }
  end
end
local refused = fence()
if refused then
  return refused
end
redis.call('SET', K.lease, mine, 'PX', ARGV[3])
-- handedOver: the next claim tells its agent the session moved cleanly (no lost turn)
redis.call('HSET', K.record, 'turnId', 0, 'handedOver', 1, 'jobPending', 1)
redis.call('HSETNX', K.record, 'jobs', 1)  -- a session registered without a count had job 1
return { 'ok', redis.call('HINCRBY', K.record, 'jobs', 1) }
