-- Shared prelude, prepended by daemon/bus/scripts.py to every other script in this folder.
--
-- Every script takes the same KEYS: the eight keys of ONE session, in the order of
-- daemon.bus.keys.SessionKeys. They share the `{sess_…}` hash tag, so each script touches a
-- single Redis Cluster slot.
--   KEYS[1] record    hash    the session record
--   KEYS[2] pending   list    accepted steers not yet drained (JSON each)
--   KEYS[3] inflight  list    steers drained at a turn end, not yet checkpointed
--   KEYS[4] journal   stream  accepted / delivered / undelivered, durable
--   KEYS[5] dedup     hash    clientMsgId -> {"digest","turnId","offset"}
--   KEYS[6] events    stream  this session's events (field `data`: the event JSON)
--   KEYS[7] history   list    checkpointed message history (JSON message each)
--   KEYS[8] lease     string  worker id holding the session, with a PX TTL
-- Worker-side scripts (everything a running attempt calls) start their ARGV with the same
-- three values and call `fence()` before anything else:
--   ARGV[1] worker     the worker id of the attempt (the lease value)
--   ARGV[2] attempt    the fencing token: the attempt number claim.lua assigned
--   ARGV[3] lease_ms   lease length in milliseconds (renewed when the fence lets it through)
-- Redis 6.2 commands only.
local K = {
  record = KEYS[1], pending = KEYS[2], inflight = KEYS[3], journal = KEYS[4],
  dedup = KEYS[5], events = KEYS[6], history = KEYS[7], lease = KEYS[8],
}

local LIVE = { queued = true, running = true, waiting = true }

-- A lease value that is a reaper's (or a releasing worker's) mark, not a worker's: any
-- worker's claim may take it (claim.lua); written by reap.lua and release.lua.
local REAPER_MARK = 'reaper:'

local function is_mark(holder)
  return holder and string.sub(holder, 1, #REAPER_MARK) == REAPER_MARK
end

-- The fencing check (docs/durability.md "Fencing"), the first thing every worker-side script does.
-- Refused unless the session is live, ARGV's attempt and worker are the record's current
-- ones, and the lease is absent or this worker's: an expired or deleted lease never lets a
-- stale attempt back in, and a finished session never changes again. Returns nil (and
-- renews the lease) when the attempt may go on, else the reply to return at once, having
-- written nothing: {'fenced', 'finished' | 'stale_attempt' | 'lease_lost'}.
local function fence()
  local state = redis.call('HMGET', K.record, 'status', 'attempt', 'worker')
  if not state[1] or not LIVE[state[1]] then
    return { 'fenced', 'finished' }
  end
  if state[2] ~= ARGV[2] or state[3] ~= ARGV[1] then
    return { 'fenced', 'stale_attempt' }
  end
  local holder = redis.call('GET', K.lease)
  if holder and holder ~= ARGV[1] then
    return { 'fenced', 'lease_lost' }
  end
  redis.call('SET', K.lease, ARGV[1], 'PX', ARGV[3])
  return nil
end

-- A pending steer by offset: its list index (0-based) and decoded JSON, or nil. The list
-- is short (WORKTRAIN_MAX_PENDING_STEERS) and in offset order, so a scan is enough.
local function find_pending(offset)
  local items = redis.call('LRANGE', K.pending, 0, -1)
  for index, raw in ipairs(items) do
    local steer = cjson.decode(raw)
    if steer['offset'] == offset then
      return index - 1, steer, raw
    end
    if steer['offset'] > offset then
      return nil
    end
  end
  return nil
end

-- What retract.lua and edit.lua answer when the steer is not (or no longer) pending:
-- {'not_found'} for an unknown session, {'steer_not_found'} for an offset never accepted,
-- else nil (the caller answers 'not_pending': the journal says what became of it).
local function check_steer(offset)
  local accepted = redis.call('HGET', K.record, 'steerOffset')
  if not redis.call('HGET', K.record, 'status') then
    return { 'not_found' }
  end
  if not offset or offset < 1 or offset > (tonumber(accepted or '0') or 0) then
    return { 'steer_not_found' }
  end
  return nil
end

-- Set the record fields of a JSON object (`raw`; '' for none) in one HSET.
local function set_record_fields(raw)
  if raw == nil or raw == '' then
    return
  end
  local flat = {}
  for field, value in pairs(cjson.decode(raw)) do
    flat[#flat + 1] = field
    flat[#flat + 1] = value
  end
  if #flat > 0 then
    redis.call('HSET', K.record, unpack(flat))
  end
end

-- The stored history cut back to its first `keep` entries, then ARGV[first..last] appended
-- (`last` defaults to the end of ARGV).
local function store_history(keep, first, last)
  last = last or #ARGV
  if keep == 0 then
    redis.call('DEL', K.history)
  else
    redis.call('LTRIM', K.history, 0, keep - 1)
  end
  if first <= last then
    redis.call('RPUSH', K.history, unpack(ARGV, first, last))
  end
end

-- Append each entry of `items` to `reply` (a script's multi-bulk answer).
local function append_all(reply, items)
  for _, item in ipairs(items) do
    reply[#reply + 1] = item
  end
  return reply
end

-- Append the in-flight steers (JSON each, offset order) to `reply`.
local function append_inflight(reply)
  return append_all(reply, redis.call('LRANGE', K.inflight, 0, -1))
end

-- Move every pending steer behind the in-flight ones; offsets stay in order. This is the
-- drain: an interrupt steer is taken with the others, so the record's `interruptTurn` (an
-- interrupt steer waits for the live turn, accept.lua) is cleared with it.
local function move_pending_to_inflight()
  redis.call('HDEL', K.record, 'interruptTurn')
  if redis.call('EXISTS', K.inflight) == 0 then
    if redis.call('EXISTS', K.pending) == 1 then
      redis.call('RENAME', K.pending, K.inflight)
    end
    return
  end
  while redis.call('LMOVE', K.pending, K.inflight, 'LEFT', 'RIGHT') do
  end
end

-- Steers become `delivered` when the request of the turn that carries them is about to
-- leave (request_sent.lua, run right before the send): journalled with that turn, and kept in the record's `receipt` ({"turnId", "offsets"}) until the worker has
-- emitted their `steer_delivered` (turn_ended.lua clears it; a claim hands a receipt its
-- dead predecessor never confirmed to the next attempt).
local function journal_delivered(turn, offsets, now)
  if #offsets == 0 then
    return
  end
  redis.call('XADD', K.journal, '*', 'type', 'delivered', 'offsets', cjson.encode(offsets),
    'turnId', turn, 'at', now)
  redis.call('HSET', K.record, 'deliveredOffset', offsets[#offsets])
  local raw = redis.call('HGET', K.record, 'receipt')
  local receipt = raw and cjson.decode(raw)
  if not receipt or tonumber(receipt['turnId']) ~= tonumber(turn) then
    receipt = { turnId = tonumber(turn), offsets = {} }
  end
  append_all(receipt['offsets'], offsets)
  redis.call('HSET', K.record, 'receipt', cjson.encode(receipt))
end

-- The offsets of the record's receipt when it belongs to `turn`, as a JSON array.
local function receipt_of(turn)
  local raw = redis.call('HGET', K.record, 'receipt')
  local receipt = raw and cjson.decode(raw)
  if receipt and tonumber(receipt['turnId']) == tonumber(turn) and #receipt['offsets'] > 0 then
    return cjson.encode(receipt['offsets'])
  end
  return '[]'
end

-- End the session: whatever is still pending, in flight, or checkpointed for a turn that
-- never started is journalled as undelivered (never silently dropped), the live turn and
-- the lease are cleared, and every key of the session expires after the retention period.
-- `ended_by` names who ended it (a worker id, or 'cancel'), so that the same worker's
-- second run of finish.lua can answer what the first did. Returns the undelivered offsets.
local function finish_session(status, outcome, detail, ended_at, retention_s, ended_by)
  move_pending_to_inflight()
  -- Steers a checkpoint put into the history for a turn that never started (the session
  -- ended at that turn boundary: cancel, a limit) reached no model call: undelivered too.
  local offsets = cjson.decode(redis.call('HGET', K.record, 'receipts') or '[]')
  for _, raw in ipairs(redis.call('LRANGE', K.inflight, 0, -1)) do
    offsets[#offsets + 1] = cjson.decode(raw)['offset']
  end
  local undelivered = '[]'
  if #offsets > 0 then
    undelivered = cjson.encode(offsets)
    redis.call('XADD', K.journal, '*', 'type', 'undelivered', 'offsets', undelivered, 'at', ended_at)
  end
  redis.call('DEL', K.pending, K.inflight, K.lease)
  redis.call('HDEL', K.record, 'receipts', 'receipt', 'jobPending', 'watchedJob', 'handedOver')
  redis.call('HSET', K.record, 'status', status, 'outcome', outcome, 'outcomeDetail', detail,
    'endedAt', ended_at, 'turnId', 0, 'endedBy', ended_by, 'undelivered', undelivered,
    'waitingFor', '')
  for _, key in ipairs(KEYS) do
    redis.call('EXPIRE', key, retention_s)
  end
  return offsets
end
