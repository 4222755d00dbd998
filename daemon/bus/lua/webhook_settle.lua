-- webhook_settle: record what one try of a delivery gave.
-- KEYS: the webhook keys (see _webhooks.lua).
-- ARGV[1] id
-- ARGV[2] record   the delivery's new JSON (attempts, last status, excerpt, state)
-- ARGV[3] result   delivered | retry | failed
-- ARGV[4] at_ms    retry: when the next try is due; failed: when it was given up
-- A delivery already settled for good (another sender's try, after a claim ran out) stays
-- as it was: delivered or failed is final.
-- Returns {'ok'} | {'settled'}
local current = redis.call('HGET', W.deliveries, ARGV[1])
if not current then
  return { 'settled' }
end
local state = cjson.decode(current)['state']
if state == 'delivered' or state == 'failed' then
  return { 'settled' }
end
redis.call('HSET', W.deliveries, ARGV[1], ARGV[2])
if ARGV[3] == 'retry' then
  redis.call('ZADD', W.due, ARGV[4], ARGV[1])
else
  redis.call('ZREM', W.due, ARGV[1])
end
if ARGV[3] == 'failed' then
  redis.call('ZADD', W.failed, ARGV[4], ARGV[1])
end
return { 'ok' }
