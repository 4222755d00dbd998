-- edit: a coordinator rewrites a pending steer's text in place (SPEC §3.7), atomically with
-- the drain: same offset, same place in the pending list.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] offset   the steer's offset
-- ARGV[2] text     the new text (already trimmed and size-checked by the web tier)
-- ARGV[3] now      RFC 3339 UTC timestamp
-- A steer still pending gets the new text, is journalled `edited` with the new text and the
-- one it replaces (`previousText`, for audit), and `steer_edited` goes into the session's
-- event stream; the model sees only the edited text. Once a drain has taken it, it is
-- delivered as it was and this answers `not_pending`. The dedup entry of its clientMsgId
-- keeps the first accepted text: a retry of the original is still a duplicate (and one with
-- the edited text under the same clientMsgId is a reuse). The same text again changes and
-- journals nothing (a retried edit), and answers `edited`.
-- Coordinator-side: no fence (like accept.lua, it changes only pending steers).
-- Returns {'edited', previousText} | {'not_pending'} | {'steer_not_found'} | {'not_found'}
local offset, text, now = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local unknown = check_steer(offset)
if unknown then
  return unknown
end
local index, steer = find_pending(offset)
if not steer then
  return { 'not_pending' }
end
local previous = steer['text']
if previous == text then
  return { 'edited', previous }
end
steer['text'] = text
redis.call('LSET', K.pending, index, cjson.encode(steer))
redis.call('XADD', K.journal, '*', 'type', 'edited', 'offset', offset, 'text', text,
  'previousText', previous, 'at', now)
redis.call('XADD', K.events, '*', 'data', cjson.encode({
  kind = 'steer_edited', sessionId = redis.call('HGET', K.record, 'sessionId'), ts = now,
  offset = offset,
}))
return { 'edited', previous }
