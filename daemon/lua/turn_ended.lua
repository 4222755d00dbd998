-- turn_ended: clear the live turn and drain every pending steer, atomically.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker     worker id (fencing)
-- ARGV[2] lease_ms   lease length in milliseconds (renewed here)
-- ARGV[3] status     status to record: 'running', or 'waiting' when the agent went idle
-- Drained steers move to the in-flight list, not out of Redis: they stay recoverable until
-- the checkpoint that carries them (checkpoint.lua) removes them (SPEC §6).
-- Returns {'ok', inflight JSON...} (offset order) | {'lease_lost'}
if not own_lease(ARGV[1], ARGV[2]) then
  return { 'lease_lost' }
end
redis.call('HSET', K.record, 'turnId', 0, 'status', ARGV[3])
move_pending_to_inflight()
return append_inflight({ 'ok' })
