-- turn_ended: clear the live turn and drain every pending steer, atomically.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] status     status to record: 'running', or 'waiting' when the agent went idle
-- Drained steers move to the in-flight list, not out of Redis: they stay recoverable until
-- the checkpoint that carries them (checkpoint.lua) removes them (docs/durability.md).
-- The ended turn's `receipt` is cleared: its worker emitted `steer_delivered` before the
-- model call it has now come back from.
-- Safe to run twice: the second run returns the same in-flight steers (and any new ones).
-- Returns {'ok', inflight JSON...} (offset order) | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
redis.call('HSET', K.record, 'turnId', 0, 'status', ARGV[4])
redis.call('HDEL', K.record, 'receipt')
move_pending_to_inflight()
return append_inflight({ 'ok' })
