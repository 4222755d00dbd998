-- request_sent: the live turn's model request is about to leave: its steers are delivered.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] turnId   the live turn whose request is being sent
-- ARGV[5] now      RFC 3339 UTC timestamp (for the journal)
-- ARGV[6] expected optional: the receipt offsets (JSON array) the worker expects, and
-- ARGV[7] announce its `steer_delivered` event (JSON): appended to the session's stream in
--                  this step when the receipt is the one expected (an attempt whose events ride
--                  with its scripts, daemon/bus/session/attemptevents.py: no round trip of its own)
-- Run by the worker as the last step before the request's bytes go (daemon/agent/sendguard.py),
-- only when checkpointed steers wait for a send (record field `receipts`, checkpoint.lua):
-- they are journalled `delivered` to THIS turn (docs/durability.md: the receipt names the turn
-- whose request actually carried them, not one that was bound and never sent) and kept in
-- the record's `receipt` until the worker has emitted `steer_delivered` (_common.lua
-- `journal_delivered`). Safe to run twice: the second run finds no `receipts` and answers
-- the same receipt. A turn that is not (or no longer) live journals nothing.
-- Returns {'ok', receipt offsets JSON array} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
if redis.call('HGET', K.record, 'turnId') == ARGV[4] then
  journal_delivered(ARGV[4], cjson.decode(redis.call('HGET', K.record, 'receipts') or '[]'), ARGV[5])
  redis.call('HDEL', K.record, 'receipts')
end
local receipt = receipt_of(ARGV[4])
if ARGV[7] and ARGV[7] ~= '' and receipt == ARGV[6] then
  redis.call('XADD', K.events, '*', 'data', ARGV[7])
end
return { 'ok', receipt }
