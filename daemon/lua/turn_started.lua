-- turn_started: bind the live turn (the CAS token of SPEC §3.1 rule 3).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker     worker id (fencing: refused unless it holds the lease)
-- ARGV[2] lease_ms   lease length in milliseconds (renewed here)
-- ARGV[3] drain      '1' for the first turn of an attempt: every pending steer moves in
--                    flight in the same step, so a steer accepted before this turn began
--                    reaches this turn's model call (no window between drain and start)
-- ARGV[4] expected   the turn id the worker is starting ('' if unknown). Safe to run twice:
--                    when that turn is already live (the first run's reply was lost and the
--                    client ran the script again), it is bound again, not counted twice,
--                    and answers the same receipts (kept in `receiptsOfLiveTurn`).
-- A cancel request is answered here, so checking it costs no extra round trip.
-- The reply also hands over the offsets an earlier checkpoint delivered into this turn's
-- request (record field `receipts`, see checkpoint.lua), so the worker emits their
-- `steer_delivered` naming the turn that really receives them, even when the worker that
-- wrote the checkpoint died before its next turn.
-- Returns {'ok', turnId, receipts JSON array, inflight JSON... (only with drain)}
--       | {'cancelled'} | {'lease_lost'}
if not own_lease(ARGV[1], ARGV[2]) then
  return { 'lease_lost' }
end
if redis.call('HGET', K.record, 'cancelRequested') == '1' then
  return { 'cancelled' }
end
local turn = tonumber(ARGV[4])
local receipts
if turn and tonumber(redis.call('HGET', K.record, 'turnId') or '0') == turn then
  -- a second run for the turn already live: hand back what the first run handed out
  receipts = redis.call('HGET', K.record, 'receiptsOfLiveTurn') or '[]'
else
  turn = redis.call('HINCRBY', K.record, 'turnCount', 1)
  receipts = redis.call('HGET', K.record, 'receipts') or '[]'
  redis.call('HSET', K.record, 'turnId', turn, 'status', 'running', 'receiptsOfLiveTurn', receipts)
  redis.call('HDEL', K.record, 'receipts')
end
local reply = { 'ok', turn, receipts }
if ARGV[3] == '1' then
  move_pending_to_inflight()
  append_inflight(reply)
end
return reply
