-- turn_ended: clear the live turn and drain every pending steer, atomically; and mark the
-- turn's end for forks (daemon/schema/turnmarks.py).
-- KEYS: the eight session keys (see _common.lua), and with a mark:
--   KEYS[9]  turns     hash: the session's turn marks (`end:<n>`, `state:<n>`, `snap:<n>`)
-- ARGV[1..3] worker, attempt, lease_ms (the fence, see _common.lua)
-- ARGV[4] status     status to record: 'running', or 'waiting' when the agent went idle
-- ARGV[5] turn       the turn that ends with a reply, or '' / absent (no mark: a turn cut
--                    short before its reply)
-- ARGV[6] end        JSON of `end:<turn>`
-- ARGV[7] state      JSON of `state:<turn>`, or '' (the position did not change)
-- ARGV[8] snap       JSON of `snap:<turn>`, or '' (no worktree snapshot)
-- ARGV[9] drop       a turn whose snapshot the keep policy pruned (its `snap:` goes), or ''
-- ARGV[10] ttl       seconds the turns hash lives after this write
-- The turn's end checkpoint, in the same step (daemon/schema/endcheckpoint.py; absent: none):
-- ARGV[11] store     'always': the turn's user message does not depend on steers (the
--                    workflow is done: steers drained now stay in flight, for finish.lua);
--                    'if_none': it does, and is stored only if no steer is in flight after
--                    the drain, else the turn's results so far (the journal's partial entry)
--                    are, and the worker checkpoints the message with the steers itself
-- ARGV[12] keep      history entries kept before it (up to the turn's reply)
-- ARGV[13] fields    JSON object of record fields to set, or '' (set whatever is stored)
-- ARGV[14] partial   the partial entry (JSON), or '' (the results are journaled already)
-- ARGV[15..] the turn's user message (JSON)
-- Drained steers move to the in-flight list, not out of Redis: they stay recoverable until
-- the checkpoint that carries them (checkpoint.lua) removes them (docs/durability.md).
-- The ended turn's `receipt` is cleared: its worker emitted `steer_delivered` before the
-- model call it has now come back from.
-- Safe to run twice: the second run returns the same in-flight steers (and any new ones),
-- and writes the same mark; what it stores is what the steers it returns call for.
-- Returns {'ok', inflight JSON...} (offset order) | {'fenced', reason}
local refused = fence()
if refused then
  return refused
end
redis.call('HSET', K.record, 'turnId', 0, 'status', ARGV[4])
redis.call('HDEL', K.record, 'receipt')
move_pending_to_inflight()
local turn = ARGV[5]
if turn and turn ~= '' then
  local fields = { 'end:' .. turn, ARGV[6] }
  if ARGV[7] ~= '' then
    append_all(fields, { 'state:' .. turn, ARGV[7] })
  end
  if ARGV[8] ~= '' then
    append_all(fields, { 'snap:' .. turn, ARGV[8] })
  end
  redis.call('HSET', KEYS[9], unpack(fields))
  if ARGV[9] ~= '' then
    redis.call('HDEL', KEYS[9], 'snap:' .. ARGV[9])
  end
  redis.call('EXPIRE', KEYS[9], ARGV[10])
end
local store = ARGV[11]
if store == 'always' or (store == 'if_none' and redis.call('EXISTS', K.inflight) == 0) then
  store_history(tonumber(ARGV[12]), 15)
elseif store == 'if_none' and ARGV[14] ~= '' then
  store_history(tonumber(ARGV[12]), 14, 14)
end
if store and store ~= '' then
  set_record_fields(ARGV[13])
end
return append_inflight({ 'ok' })
