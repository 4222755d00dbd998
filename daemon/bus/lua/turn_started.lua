-- turn_started: bind the live turn (the CAS token of README's HTTP API rule 3).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] drain      '1' for the first turn of an attempt: every pending steer moves in
--                    flight in the same step, so a steer accepted before this turn began
--                    reaches this turn's model call (no window between drain and start)
-- ARGV[5] expected   the turn id the worker is starting ('' if unknown). Safe to run twice:
--                    when that turn is already live (the first run's reply was lost and the
--                    client ran the script again), it is bound again, not counted twice,
--                    and answers the same receipt.
-- ARGV[6] now        RFC 3339 UTC timestamp (for the journal)
-- ARGV[7] announce   optional: the `turn_started` event of the expected turn (its JSON),
--                    appended to the session's stream in this step when that is the turn
--                    bound (an attempt whose events ride with its scripts, daemon/bus/session/attemptevents.py:
--                    no round trip of its own before the model call; a re-run appends it again)
-- A cancel request is answered here, so checking it costs no extra round trip.
-- The steers an earlier checkpoint put into this turn's request (record field `receipts`,
-- see checkpoint.lua) are NOT journalled here: a turn bound whose request never left (a
-- kill between binding and sending) must not be named (docs/durability.md). They wait in
-- `receipts` for request_sent.lua, which the worker runs right before the request's bytes
-- leave; a turn bound again after that answers its receipt (`receipt_of`).
-- Returns {'ok', turnId, receipt offsets JSON array, receipts waiting for the send (JSON
--         array), inflight JSON... (only with drain)} | {'cancelled'} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
if redis.call('HGET', K.record, 'cancelRequested') == '1' then
  return { 'cancelled' }
end
local turn = tonumber(ARGV[5])
if not (turn and tonumber(redis.call('HGET', K.record, 'turnId') or '0') == turn) then
  turn = redis.call('HINCRBY', K.record, 'turnCount', 1)
  redis.call('HSET', K.record, 'turnId', turn, 'status', 'running')
  -- a receipt left by an earlier attempt was handed over by claim.lua and emitted since
  redis.call('HDEL', K.record, 'receipt')
end
if ARGV[7] and ARGV[7] ~= '' and turn == tonumber(ARGV[5]) then
  redis.call('XADD', K.events, '*', 'data', ARGV[7])
end
local reply = { 'ok', turn, receipt_of(turn), redis.call('HGET', K.record, 'receipts') or '[]' }
if ARGV[4] == '1' then
  move_pending_to_inflight()
  append_inflight(reply)
end
return reply
