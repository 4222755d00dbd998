-- set_fields: a running attempt writes record fields outside a checkpoint (the delivery
-- of a worktree session, README's Coding sessions, written before finish).
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] fields      JSON object of record fields to set
-- Returns {'ok'} | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
set_record_fields(ARGV[4])
return { 'ok' }
