-- edit: a coordinator rewrites a pending steer's text in place (README's Managing steers), atomically with
-- the drain: same offset, same place in the pending list.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] offset   the steer's offset
-- ARGV[2] text     the new text (already trimmed and size-checked by the web tier)
-- ARGV[3] now      RFC 3339 UTC timestamp
-- ARGV[4] max      at most this many edits of one steer (WORKTRAIN_MAX_STEER_EDITS, docs/security.md)
-- A steer still pending gets the new text, is journalled `edited` with the new text and the
-- SHA-1 and length of the one it replaces (`previousHash`, `previousLength`: the journal of
-- one steer stays bounded — the replaced text is the previous entry's `text`, or the
-- accepted one), and `steer_edited` goes into the session's event stream; the model sees
-- only the edited text. The pending entry counts its edits (`edits`); one more than `max`
-- changes nothing and answers `too_many_edits`. Once a drain has taken it, it is
-- delivered as it was and this answers `not_pending`. The dedup entry of its clientMsgId
-- keeps the first accepted text: a retry of the original is still a duplicate (and one with
-- the edited text under the same clientMsgId is a reuse). The same text again changes and
-- journals nothing (a retried edit), and answers `edited`.
-- Coordinator-side: no fence (like accept.lua, it changes only pending steers).
-- Returns {'edited', previousText} | {'too_many_edits'} | {'not_pending'} | {'steer_not_found'}
--   | {'not_found'}
local offset, text, now, max_edits = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
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
local edits = tonumber(steer['edits']) or 0
if edits >= max_edits then
  return { 'too_many_edits' }
end
steer['text'] = text
steer['edits'] = edits + 1
redis.call('LSET', K.pending, index, cjson.encode(steer))
-- (redis.sha1hex is in every Redis; fakeredis, used by the fast unit tests, lacks it)
local digest = redis.sha1hex and redis.sha1hex(previous) or ''
redis.call('XADD', K.journal, '*', 'type', 'edited', 'offset', offset, 'text', text,
  'previousHash', digest, 'previousLength', #previous, 'at', now)
redis.call('XADD', K.events, '*', 'data', cjson.encode({
  kind = 'steer_edited', sessionId = redis.call('HGET', K.record, 'sessionId'), ts = now,
  offset = offset,
}))
return { 'edited', previous }
