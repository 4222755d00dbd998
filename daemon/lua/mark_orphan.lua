-- mark_orphan: the reaper claims the right to re-enqueue a session whose worker vanished.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] reaper     reaper id (written into the `reaper:` mark)
-- ARGV[2] lease_ms   how long the mark holds off another reaper pass
-- Returns 1 when the session is running or waiting with no lease (now marked: the caller
-- enqueues a resume job), else 0.
local status = redis.call('HGET', K.record, 'status')
if status ~= 'running' and status ~= 'waiting' then
  return 0
end
if redis.call('EXISTS', K.lease) == 1 then
  return 0
end
redis.call('SET', K.lease, REAPER_MARK .. ARGV[1], 'PX', ARGV[2])
return 1
