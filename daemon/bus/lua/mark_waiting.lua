-- mark_waiting: show in the record what a live turn is waiting for (docs/DEVELOPING.md `waitingFor`).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] reason     'model_slot' (the fleet-wide cap), 'model_retry' (a retry's backoff);
--                    '' clears it (an empty field, as checkpoints write it: nothing waits)
-- ARGV[5] status     optional: 'waiting' or 'running' as well (a live turn that waits for
--                    its children or a reply shows `status: waiting`, README's Sub-agents and questions); '' keeps it
-- Safe to run twice: it writes the same field again.
-- Returns {'ok'} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
redis.call('HSET', K.record, 'waitingFor', ARGV[4])
if ARGV[5] == 'waiting' or ARGV[5] == 'running' then
  redis.call('HSET', K.record, 'status', ARGV[5])
end
return { 'ok' }
