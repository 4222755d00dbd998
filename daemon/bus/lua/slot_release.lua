-- slot_release: give a model-call slot back after the call, or leave the line for one (a
-- waiter that was cancelled or is stopping); then tell the waiters whose turn it now is.
-- KEYS: the semaphore's four keys (see _slots.lua).
-- ARGV[1] token    the call's id
-- ARGV[2] limit    how many calls may be in flight at once, fleet-wide
-- ARGV[3] channel  the pub/sub channel that wakes waiters (not a key: pub/sub is global)
-- When a slot came free and someone waits, it PUBLISHes, space-separated, the tokens now
-- first in line for the free slots, so exactly those waiters wake and take them (each still
-- takes its slot with slot_acquire.lua; a lost message only delays a waiter to its next
-- ask). Expired waiters are dropped first, so the message names live ones.
-- Safe to run twice: the second run finds nothing to remove and publishes nothing.
-- Returns 1 when the token held a slot, else 0.
local token, limit = ARGV[1], tonumber(ARGV[2])
redis.call('ZREM', S.queue, token)
redis.call('ZREM', S.waiters, token)
local held = redis.call('ZREM', S.holders, token)
if held == 1 and redis.call('ZCARD', S.queue) > 0 then
  drop_expired(now_ms())
  local free = limit - redis.call('ZCARD', S.holders)
  if free > 0 then
    local next_in_line = redis.call('ZRANGE', S.queue, 0, free - 1)
    if #next_in_line > 0 then
      redis.call('PUBLISH', ARGV[3], table.concat(next_in_line, ' '))
    end
  end
end
return held
