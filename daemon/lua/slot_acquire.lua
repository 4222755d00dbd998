-- slot_acquire: take one of the fleet's model-call slots, or keep a place in line for one
-- (WORKTRAIN_MAX_MODEL_CALLS, SPEC §4.1 "Fleet-wide cap"). Also renews a slot already held.
-- Not a session script: it does not take the session prelude (_common.lua).
-- KEYS[1] holders  zset    token -> expiry (ms, Redis' clock): the calls in flight now
-- KEYS[2] queue    zset    token -> ticket: who waits, first come first served
-- KEYS[3] waiters  zset    token -> expiry (ms) of its place in line
-- KEYS[4] ticket   string  the last ticket handed out (INCR)
-- ARGV[1] token    the call's id, unique per call (`<sessionId>:<random>`)
-- ARGV[2] limit    how many calls may be in flight at once, fleet-wide
-- ARGV[3] ttl_ms   how long a slot stays held without renewal: the slot of a dead holder
--                  comes back after this (the worker's lease)
-- ARGV[4] wait_ms  how long a place in line stays kept without asking again
-- ARGV[5] mode     'take': take a slot, or queue up for one | 'renew': renew a slot held,
--                  never queue
-- Fair: a slot goes to a waiter only if fewer waiters are ahead of it than slots are free,
-- so the line is served in arrival order and nobody starves. Expired holders and waiters
-- are dropped first, on Redis' own clock (TIME): the hosts' clocks do not matter.
-- Safe to run twice: a token that holds a slot renews it; one in line keeps its ticket.
-- Returns {1, 0, 0} held | {0, position, free} waiting (position 1 = next in line) |
--         {0, 0, 0} a renew of a slot not held (it expired, or was released)
local holders, queue, waiters, ticket = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, limit = ARGV[1], tonumber(ARGV[2])
local ttl_ms, wait_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', now)
if #gone > 0 then
  redis.call('ZREM', queue, unpack(gone))
  redis.call('ZREM', waiters, unpack(gone))
end

if redis.call('ZSCORE', holders, token) then
  redis.call('ZADD', holders, now + ttl_ms, token)
  return { 1, 0, 0 }
end
if ARGV[5] == 'renew' then
  return { 0, 0, 0 }
end
if not redis.call('ZSCORE', queue, token) then
  redis.call('ZADD', queue, redis.call('INCR', ticket), token)
end
local ahead = redis.call('ZRANK', queue, token)
local free = limit - redis.call('ZCARD', holders)
if ahead < free then
  redis.call('ZREM', queue, token)
  redis.call('ZREM', waiters, token)
  redis.call('ZADD', holders, now + ttl_ms, token)
  return { 1, 0, 0 }
end
redis.call('ZADD', waiters, now + wait_ms, token)
return { 0, ahead + 1, math.max(free, 0) }
