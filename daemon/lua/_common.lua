-- Shared prelude, prepended by daemon/scripts.py to every other script in this folder.
--
-- Every script takes the same KEYS: the eight keys of ONE session, in the order of
-- daemon.keys.SessionKeys. They share the `{sess_…}` hash tag, so each script touches a
-- single Redis Cluster slot.
--   KEYS[1] record    hash    the session record
--   KEYS[2] pending   list    accepted steers not yet drained (JSON each)
--   KEYS[3] inflight  list    steers drained at a turn end, not yet checkpointed
--   KEYS[4] journal   stream  accepted / delivered / undelivered, durable
--   KEYS[5] dedup     hash    clientMsgId -> {"digest","turnId","offset"}
--   KEYS[6] events    stream  this session's events (field `data`: the event JSON)
--   KEYS[7] history   list    checkpointed message history (JSON message each)
--   KEYS[8] lease     string  worker id holding the session, with a PX TTL
-- Redis 6.2 commands only.
local K = {
  record = KEYS[1], pending = KEYS[2], inflight = KEYS[3], journal = KEYS[4],
  dedup = KEYS[5], events = KEYS[6], history = KEYS[7], lease = KEYS[8],
}

local LIVE = { queued = true, running = true, waiting = true }

-- A lease value that is a reaper's (or a releasing worker's) mark, not a worker's: any
-- worker's claim may take it (claim.lua); written by mark_orphan.lua and release.lua.
local REAPER_MARK = 'reaper:'

-- Take or renew the lease when it is free or already ours. A worker whose lease another
-- worker took is fenced: every write it attempts afterwards is refused.
local function own_lease(worker, lease_ms)
  local holder = redis.call('GET', K.lease)
  if holder and holder ~= worker then
    return false
  end
  redis.call('SET', K.lease, worker, 'PX', lease_ms)
  return true
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

-- Move every pending steer behind the in-flight ones; offsets stay in order.
local function move_pending_to_inflight()
  if redis.call('EXISTS', K.inflight) == 0 then
    if redis.call('EXISTS', K.pending) == 1 then
      redis.call('RENAME', K.pending, K.inflight)
    end
    return
  end
  while redis.call('LMOVE', K.pending, K.inflight, 'LEFT', 'RIGHT') do
  end
end

-- End the session: whatever is still pending, in flight, or checkpointed for a turn that
-- never started is journalled as undelivered (never silently dropped), the live turn and the lease are cleared, and every key of
-- the session expires after the retention period. Returns the undelivered offsets.
local function finish_session(status, outcome, detail, ended_at, retention_s)
  move_pending_to_inflight()
  -- Steers a checkpoint put into the history for a turn that never started (the session
  -- ended at that turn boundary: cancel, a limit) reached no model call: undelivered too.
  local offsets = cjson.decode(redis.call('HGET', K.record, 'receipts') or '[]')
  redis.call('HDEL', K.record, 'receipts')
  for _, raw in ipairs(redis.call('LRANGE', K.inflight, 0, -1)) do
    offsets[#offsets + 1] = cjson.decode(raw)['offset']
  end
  if #offsets > 0 then
    redis.call('XADD', K.journal, '*', 'type', 'undelivered',
      'offsets', cjson.encode(offsets), 'at', ended_at)
  end
  redis.call('DEL', K.pending, K.inflight, K.lease)
  redis.call('HDEL', K.record, 'waitingFor')
  redis.call('HSET', K.record, 'status', status, 'outcome', outcome,
    'outcomeDetail', detail, 'endedAt', ended_at, 'turnId', 0)
  for _, key in ipairs(KEYS) do
    redis.call('EXPIRE', key, retention_s)
  end
  return offsets
end
