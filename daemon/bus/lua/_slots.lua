-- Prelude of the model-slot scripts (slot_acquire.lua, slot_release.lua), prepended by
-- daemon/bus/scripts.py. Their KEYS, the semaphore's four keys (daemon.bus.keys.SlotKeys), share the
-- `{model-slots}` hash tag, so each script touches a single Redis Cluster slot:
--   KEYS[1] holders  zset    token -> expiry (ms, Redis' clock): the calls in flight now
--   KEYS[2] queue    zset    token -> ticket: who waits, first come first served
--   KEYS[3] waiters  zset    token -> expiry (ms) of its place in line
--   KEYS[4] ticket   string  the last ticket handed out (INCR)
-- Redis 6.2 commands only.
local S = { holders = KEYS[1], queue = KEYS[2], waiters = KEYS[3], ticket = KEYS[4] }

-- Now in ms, on Redis' clock: the hosts' clocks do not matter.
local function now_ms()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- Dead holders give their slot back; dead waiters lose their place in line.
local function drop_expired(now)
  redis.call('ZREMRANGEBYSCORE', S.holders, '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', S.waiters, '-inf', now)
  if #gone > 0 then
    redis.call('ZREM', S.queue, unpack(gone))
    redis.call('ZREM', S.waiters, unpack(gone))
  end
end
