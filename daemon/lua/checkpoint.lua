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
if #delivered > 0 then
  redis.call('LTRIM', K.inflight, #delivered, -1)
  redis.call('XADD', K.journal, '*', 'type', 'delivered', 'offsets', ARGV[4],
    'turnId', ARGV[5], 'at', ARGV[6])
  redis.call('HSET', K.record, 'deliveredOffset', delivered[#delivered])
end
for field, value in pairs(cjson.decode(ARGV[7])) do
  redis.call('HSET', K.record, field, value)
end
return { 'ok' }
