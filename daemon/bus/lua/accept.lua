-- accept: README's HTTP API rules 1-4 as one atomic step.
-- KEYS: the eight session keys (see _common.lua).
-- ARGV[1] text            the steer text (already trimmed and validated)
-- ARGV[2] digest          hex digest of the text, compared on a clientMsgId repeat
-- ARGV[3] expectedTurnId  decimal, or '' when not given
-- ARGV[4] clientMsgId     or '' when not given
-- ARGV[5] now             RFC 3339 UTC timestamp of acceptance
-- ARGV[6] maxPending      decimal: refuse when this many steers wait (pending + in flight);
--                         '' or 0: no cap
-- ARGV[7] mode            'interrupt' or '' (queue). An interrupt steer that finds a live
--                         turn sets the record's `interruptTurn` to it and is announced on
-- ARGV[8] channel         this Pub/Sub channel as `<sessionId> <turnId>` (README's Managing steers); with
--                         no live turn it is an ordinary steer
-- ARGV[9] traceparent     W3C traceparent of the steer's POST span, or '' / absent (tracing
--                         off): kept with the pending steer, the model call carrying it links to it
-- Returns one of:
--   {'accepted', turnId, offset}   {'duplicate', turnId, offset}
--   {'not_found'}   {'client_msg_id_reuse'}   {'no_live_turn'}   {'stale_turn', liveTurnId}
--   {'too_many_pending_steers', maxPending}
local text, digest, expected, cid, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local max_pending = tonumber(ARGV[6] or '') or 0
local interrupt = ARGV[7] == 'interrupt'
local traceparent = nil
if ARGV[9] and ARGV[9] ~= '' then
  traceparent = ARGV[9]
end

-- 1. the session exists and is not finished
local status = redis.call('HGET', K.record, 'status')
if not status or not LIVE[status] then
  return { 'not_found' }
end

-- 2. a clientMsgId seen before: same text is a duplicate, other text a reuse
if cid ~= '' then
  local seen = redis.call('HGET', K.dedup, cid)
  if seen then
    local ref = cjson.decode(seen)
    if ref['digest'] == digest then
      return { 'duplicate', ref['turnId'], ref['offset'] }
    end
    return { 'client_msg_id_reuse' }
  end
end

-- 3. compare-and-swap on the live turn
local live = tonumber(redis.call('HGET', K.record, 'turnId') or '0') or 0
if expected ~= '' then
  if live == 0 then
    return { 'no_live_turn' }
  end
  if live ~= tonumber(expected) then
    return { 'stale_turn', live }
  end
end

-- 4. the pending cap: nothing is recorded for a steer beyond it
if max_pending > 0 and redis.call('LLEN', K.pending) + redis.call('LLEN', K.inflight) >= max_pending then
  return { 'too_many_pending_steers', max_pending }
end

-- 5. accept: next contiguous offset, pending list, journal, dedup index, session event
local offset = redis.call('HINCRBY', K.record, 'steerOffset', 1)
local cid_json = cjson.null
if cid ~= '' then
  cid_json = cid
end
local mode = nil
if interrupt then
  mode = 'interrupt'
end
redis.call('RPUSH', K.pending, cjson.encode({
  offset = offset, text = text, turnId = live, clientMsgId = cid_json, acceptedAt = now, mode = mode,
  traceparent = traceparent,
}))
local entry = { 'type', 'accepted', 'offset', offset, 'turnId', live, 'clientMsgId', cid, 'text', text, 'at', now }
if mode then
  append_all(entry, { 'mode', mode })
end
redis.call('XADD', K.journal, '*', unpack(entry))
if cid ~= '' then
  redis.call('HSET', K.dedup, cid, cjson.encode({ digest = digest, turnId = live, offset = offset }))
end
redis.call('XADD', K.events, '*', 'data', cjson.encode({
  kind = 'steer_accepted', sessionId = redis.call('HGET', K.record, 'sessionId'), ts = now,
  turnId = live, offset = offset, clientMsgId = cid_json, mode = mode,
}))
if interrupt and live > 0 then
  redis.call('HSET', K.record, 'interruptTurn', live)
  redis.call('PUBLISH', ARGV[8], redis.call('HGET', K.record, 'sessionId') .. ' ' .. live)
end
return { 'accepted', live, offset }
