-- slot_acquire: take one of the fleet's model-call slots, or keep a place in line for one
-- (WORKTRAIN_MAX_MODEL_CALLS, docs/DEVELOPING.md "Fleet-wide cap"). Also renews a slot already held.
-- KEYS: the semaphore's four keys (see _slots.lua).
-- ARGV[1] token    the call's id, unique per call (`<sessionId>:<random>`)
-- ARGV[2] limit    how many calls may be in flight at once, fleet-wide
-- ARGV[3] ttl_ms   how long a slot stays held without renewal: the slot of a dead holder
--                  comes back after this (the worker's lease)
-- ARGV[4] wait_ms  how long a place in line stays kept without asking again
-- ARGV[5] mode     'take': take a slot, or queue up for one | 'renew': renew a slot held,
--                  never queue
-- Fair: a slot goes to a waiter only if fewer waiters are ahead of it than slots are free,
-- so the line is served in arrival order and nobody starves. Expired holders and waiters
-- are dropped first.
-- Safe to run twice: a token that holds a slot renews it; one in line keeps its ticket.
-- Returns {1, 0, 0} held (taken or renewed) | {0, position, free} waiting (position 1 = next
--         in line) | {0, 0, 0} a renew of a slot not held (it expired, or was released)
local token, limit = ARGV[1], tonumber(ARGV[2])
local ttl_ms, wait_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
drop_expired(now)

if redis.call('ZSCORE', S.holders, token) then
  redis.call('ZADD', S.holders, now + ttl_ms, token)
  return { 1, 0, 0 }
end
if ARGV[5] == 'renew' then
  return { 0, 0, 0 }
end
if not redis.call('ZSCORE', S.queue, token) then
  redis.call('ZADD', S.queue, redis.call('INCR', S.ticket), token)
end
local ahead = redis.call('ZRANK', S.queue, token)
local free = limit - redis.call('ZCARD', S.holders)
if ahead < free then
  redis.call('ZREM', S.queue, token)
  redis.call('ZREM', S.waiters, token)
  redis.call('ZADD', S.holders, now + ttl_ms, token)
  return { 1, 0, 0 }
end
redis.call('ZADD', S.waiters, now + wait_ms, token)
return { 0, ahead + 1, math.max(free, 0) }
