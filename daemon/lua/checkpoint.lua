-- checkpoint: persist the message history after a turn and retire the steers it carries.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] worker      worker id (fencing)
-- ARGV[2] lease_ms    lease length in milliseconds (renewed here)
-- ARGV[3] keep        how many history entries to keep before appending
-- ARGV[4] delivered   JSON array of the offsets this history now carries ('[]' for none)
-- ARGV[5] turnId      the turn that will receive them (for the journal)
-- ARGV[6] now         RFC 3339 UTC timestamp
-- ARGV[7] fields      JSON object of record fields to set (step position, ...)
-- ARGV[8..] messages  JSON messages appended to the history
-- The history write and the removal from the in-flight list are one step: a steer is
-- either in the checkpoint or still in flight, never both and never neither.
-- Safe to run twice (the first run's reply lost, the client running it again): the history
-- is cut back to `keep` before appending, and only in-flight steers that are still there,
-- at the head in offset order, are retired and journalled, so a second run retires none.
-- The retired offsets are also added to the record field `receipts` unless the receiving
-- turn is already live (an attempt's opening message, whose receipt the worker emits at
-- once): the next turn_started hands them to the worker for its `steer_delivered`.
-- Returns {'ok'} | {'lease_lost'}
if not own_lease(ARGV[1], ARGV[2]) then
  return { 'lease_lost' }
end
local keep = tonumber(ARGV[3])
if keep == 0 then
  redis.call('DEL', K.history)
else
  redis.call('LTRIM', K.history, 0, keep - 1)
end
for i = 8, #ARGV do
  redis.call('RPUSH', K.history, ARGV[i])
end
local delivered = cjson.decode(ARGV[4])
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
  local offsets = ARGV[4]
  if retired < #delivered then
    offsets = '[' .. table.concat(delivered, ',', 1, retired) .. ']'
  end
  redis.call('XADD', K.journal, '*', 'type', 'delivered', 'offsets', offsets,
    'turnId', ARGV[5], 'at', ARGV[6])
  redis.call('HSET', K.record, 'deliveredOffset', delivered[retired])
  if redis.call('HGET', K.record, 'turnId') ~= ARGV[5] then
    local receipts = cjson.decode(redis.call('HGET', K.record, 'receipts') or '[]')
    for i = 1, retired do
      receipts[#receipts + 1] = delivered[i]
    end
    redis.call('HSET', K.record, 'receipts', cjson.encode(receipts))
  end
end
for field, value in pairs(cjson.decode(ARGV[7])) do
  redis.call('HSET', K.record, field, value)
end
return { 'ok' }
