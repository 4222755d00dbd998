-- checkpoint: persist the message history after a turn and retire the steers it carries.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] keep        how many history entries to keep before appending
-- ARGV[5] delivered   JSON array of the offsets this history now carries ('[]' for none)
-- ARGV[6] turnId      the turn that will receive them
-- ARGV[7] now         RFC 3339 UTC timestamp
-- ARGV[8] fields      JSON object of record fields to set (step position, ...), or '' for none
--                     (the worker sends only those that changed: daemon/bus/session/checkpointfields.py)
-- ARGV[9..] messages  JSON messages appended to the history
-- The history write and the removal from the in-flight list are one step: a steer is
-- either in the checkpoint or still in flight, never both and never neither.
-- Also the turn journal (docs/durability.md, daemon/agent/journal.py): a reply is appended (keep =
-- the history's length) before its first tool starts, and the turn's results so far are
-- rewritten as one partial user message (keep = up to the reply) as each tool ends.
-- Safe to run twice (the first run's reply lost, the client running it again): the history
-- is cut back to `keep` before appending, and only in-flight steers that are still there,
-- at the head in offset order, are retired, so a second run retires none.
-- Retired steers wait in the record field `receipts` until the request of the turn that
-- carries them is sent (request_sent.lua journals them `delivered` to that turn), also
-- when the receiving turn is already live (an attempt's opening message).
-- Returns {'ok'} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
store_history(tonumber(ARGV[4]), 9)
local delivered = cjson.decode(ARGV[5])
local n = #delivered
local function inflight_offset(index)
  local raw = redis.call('LINDEX', K.inflight, index)
  return raw and cjson.decode(raw)['offset']
end
local retired = 0
if n > 0 and inflight_offset(0) == delivered[1] and inflight_offset(n - 1) == delivered[n] then
  -- The usual case, in O(1) decodes: in-flight offsets are contiguous and increasing, and
  -- the delivered ones are a prefix of them, so equal first and n-th mean the first n.
  redis.call('LTRIM', K.inflight, n, -1)
  retired = n
else
  for _, offset in ipairs(delivered) do
    if inflight_offset(0) ~= offset then
      break
    end
    redis.call('LPOP', K.inflight)
    retired = retired + 1
  end
end
if retired > 0 then
  local offsets = {}
  for i = 1, retired do
    offsets[i] = delivered[i]
  end
  local receipts = cjson.decode(redis.call('HGET', K.record, 'receipts') or '[]')
  append_all(receipts, offsets)
  redis.call('HSET', K.record, 'receipts', cjson.encode(receipts))
end
set_record_fields(ARGV[8])
return { 'ok' }
