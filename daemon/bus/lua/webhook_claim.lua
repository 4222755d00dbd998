-- webhook_claim: a sender takes the deliveries due now, for one try each.
-- KEYS: the webhook keys (see _webhooks.lua).
-- ARGV[1] now_ms
-- ARGV[2] claim_ms  how long the taken deliveries stay out of the others' reach: a sender
--                   that dies mid-try leaves them due again after it (at least once)
-- ARGV[3] limit     at most this many
-- A delivery whose record is gone (pruned) leaves the due set.
-- Returns the taken records (JSON each).
local taken = {}
local ids = redis.call('ZRANGEBYSCORE', W.due, '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do
  local record = redis.call('HGET', W.deliveries, id)
  if record then
    redis.call('ZADD', W.due, tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
    taken[#taken + 1] = record
  else
    redis.call('ZREM', W.due, id)
  end
end
return taken
