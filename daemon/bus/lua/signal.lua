-- signal: append one coordinator signal to the session's signal stream (README's Sub-agents and questions).
-- KEYS: the eight session keys (see _common.lua), then
--   KEYS[9] signals  stream  the session's signals (daemon.bus.keys.Keys.signals_of)
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] signal     the signal's JSON without its offset
-- ARGV[5] maxlen     the session stream's approximate cap
-- ARGV[6] ttl        seconds the stream lives after its last signal (at least the retention
--                    period after the session ends: a session lives a wall clock at most)
-- The offset is the record's `signalOffset` + 1 (1, 2, 3 ... contiguous). Running it twice
-- (a lost reply retried) appends the signal twice under two offsets: a signal is a report,
-- and a repeat is visible as such rather than lost.
-- Returns {'ok', offset, entryId} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
local offset = redis.call('HINCRBY', K.record, 'signalOffset', 1)
local id = redis.call('XADD', KEYS[9], 'MAXLEN', '~', ARGV[5], '*', 'offset', offset, 'data', ARGV[4])
redis.call('EXPIRE', KEYS[9], ARGV[6])
return { 'ok', offset, id }
