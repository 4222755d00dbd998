-- slot_release: give a model-call slot back after the call, or leave the line for one
-- (a waiter that was cancelled or is stopping). Not a session script (no _common.lua).
-- KEYS[1] holders  zset    token -> expiry (ms)
-- KEYS[2] queue    zset    token -> ticket
-- KEYS[3] waiters  zset    token -> expiry (ms) of its place in line
-- KEYS[4] ticket   string  (unused here; the same four keys as slot_acquire.lua)
-- ARGV[1] token    the call's id
-- Safe to run twice: the second run finds nothing to remove.
-- Returns 1 when the token held a slot, else 0.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
