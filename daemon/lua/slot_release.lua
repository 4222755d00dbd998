-- slot_release: give a model-call slot back after the call, or leave the line for one (a
-- waiter that was cancelled or is stopping); then tell the waiters whose turn it now is.
-- Not a session script (no _common.lua).
-- KEYS[1] holders  zset    token -> expiry (ms, Redis' clock)
-- KEYS[2] queue    zset    token -> ticket
-- KEYS[3] waiters  zset    token -> expiry (ms) of its place in line
-- KEYS[4] ticket   string  (unused here; the same four keys as slot_acquire.lua)
-- ARGV[1] token    the call's id
-- ARGV[2] limit    how many calls may be in flight at once, fleet-wide
-- ARGV[3] channel  the pub/sub channel that wakes waiters (not a key: pub/sub is global)
-- When a slot came free and someone waits, it PUBLISHes, space-separated, the tokens now
-- first in line for the free slots, so exactly those waiters wake and take them (each still
-- takes its slot with slot_acquire.lua; a message lost only delays a waiter to its next ask).
-- Waiters whose place expired are dropped first, so the message names live ones.
-- Safe to run twice: the second run finds nothing to remove and publishes nothing.
-- Returns 1 when the token held a slot, else 0.
local holders, queue, waiters = KEYS[1], KEYS[2], KEYS[3]
local token, limit = ARGV[1], tonumber(ARGV[2])
redis.call('ZREM', queue, token)
redis.call('ZREM', waiters, token)
local held = redis.call('ZREM', holders, token)
if held == 1 and redis.call('ZCARD', queue) > 0 then
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', now)
  if #gone > 0 then
    redis.call('ZREM', queue, unpack(gone))
    redis.call('ZREM', waiters, unpack(gone))
  end
  local free = limit - redis.call('ZCARD', holders)
  if free > 0 then
    local next_in_line = redis.call('ZRANGE', queue, 0, free - 1)
    if #next_in_line > 0 then
      redis.call('PUBLISH', ARGV[3], table.concat(next_in_line, ' '))
    end
  end
end
return held
