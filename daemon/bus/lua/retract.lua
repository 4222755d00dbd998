-- retract: a coordinator withdraws a pending steer (README's Managing steers), atomically with the drain.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] offset   the steer's offset
-- ARGV[2] now      RFC 3339 UTC timestamp
-- A steer still in the pending list (no turn end, take or claim has moved it in flight) leaves
-- it, is journalled `retracted` (its text kept there for audit) and `steer_retracted` goes
-- into the session's event stream, all in this step: no model call ever sees it. Once a
-- drain has taken it, it is delivered (or, if the session ends first, undelivered) as it
-- was, and this answers `not_pending`. The dedup entry of its clientMsgId stays: a retry of
-- the original steer is still a duplicate, never a second steer.
-- When the retracted steer was the interrupt waiting for the live turn and no other one
-- waits, the record's `interruptTurn` is cleared (nothing is left to interrupt for).
-- Coordinator-side: no fence (like accept.lua, it changes only pending steers). Run twice,
-- the second run answers `not_pending` (the journal then says `retracted`).
-- Returns {'retracted', text} | {'not_pending'} | {'steer_not_found'} | {'not_found'}
local offset, now = tonumber(ARGV[1]), ARGV[2]
local unknown = check_steer(offset)
if unknown then
  return unknown
end
local _, steer, raw = find_pending(offset)
if not steer then
  return { 'not_pending' }
end
redis.call('LREM', K.pending, 1, raw)
redis.call('XADD', K.journal, '*', 'type', 'retracted', 'offset', offset, 'text', steer['text'], 'at', now)
if steer['mode'] == 'interrupt' then
  local another = false
  for _, item in ipairs(redis.call('LRANGE', K.pending, 0, -1)) do
    if cjson.decode(item)['mode'] == 'interrupt' then
      another = true
      break
    end
  end
  if not another then
    redis.call('HDEL', K.record, 'interruptTurn')
  end
end
redis.call('XADD', K.events, '*', 'data', cjson.encode({
  kind = 'steer_retracted', sessionId = redis.call('HGET', K.record, 'sessionId'), ts = now,
  offset = offset,
}))
return { 'retracted', steer['text'] }
