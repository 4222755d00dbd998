// Read-only (standalone) mode: no Redis, so no session records or steer journals — only the
// event and issue mirrors. Sessions and their steers are folded here from the events, the
// way the worker's own records evolve (docs/DEVELOPING.md). Steer texts are not in events: the
// journal shows offsets and states only.

const EMPTY = {
  workflowId: '',
  goal: '',
  workspacePath: '',
  status: 'queued',
  turnId: 0,
  turnCount: 0,
  stepId: null,
  stepIndex: 0,
  stepCount: 0,
  pendingSteers: 0,
  steerOffset: 0,
  createdAt: null,
  startedAt: null,
  endedAt: null,
  outcome: null,
  outcomeDetail: null,
  worker: null,
  attempt: 0,
};

function record(records, event) {
  let found = records.get(event.sessionId);
  if (!found) {
    found = { ...EMPTY, sessionId: event.sessionId, createdAt: event.ts || null };
    records.set(event.sessionId, found);
  }
  return found;
}

const FOLD = {
  session_queued(r, e) {
    r.workflowId = e.workflowId || r.workflowId;
    r.goal = e.goal || r.goal;
    r.createdAt = e.ts || r.createdAt;
  },
  session_started(r, e) {
    r.status = 'running';
    r.startedAt = r.startedAt || e.ts;
    r.worker = e.worker ?? r.worker;
    r.attempt = e.attempt ?? r.attempt;
  },
  session_resumed(r, e) {
    r.status = 'running';
    r.worker = e.worker ?? r.worker;
  },
  turn_started(r, e) {
    r.status = 'running';
    r.turnId = e.turnId;
    r.turnCount = Math.max(r.turnCount, e.turnId || 0);
  },
  turn_ended(r, e) {
    r.turnId = 0;
    r.status = e.toolCalls ? 'running' : 'waiting'; // an idle turn waits for a steer
  },
  step_advanced(r, e) {
    r.stepIndex = e.stepIndex;
    r.stepCount = e.stepCount;
    r.stepId = e.toStepId;
  },
  steer_accepted(r, e) {
    r.pendingSteers += 1;
    r.steerOffset = Math.max(r.steerOffset, e.offset || 0);
  },
  steer_delivered(r, e) {
    r.pendingSteers = Math.max(0, r.pendingSteers - (e.offsets || []).length);
  },
  steer_undelivered(r, e) {
    r.pendingSteers = Math.max(0, r.pendingSteers - (e.offsets || []).length);
  },
  steer_retracted(r) {
    r.pendingSteers = Math.max(0, r.pendingSteers - 1);
  },
  session_completed(r, e) {
    r.status = e.status || 'completed';
    r.outcome = e.outcome || null;
    r.outcomeDetail = e.detail || null;
    r.endedAt = e.ts || null;
    r.turnId = 0;
    r.pendingSteers = 0;
  },
};

/** Fold one event into `records` (a Map of sessionId -> record). Returns the record. */
export function foldSessionEvent(records, event) {
  if (!event.sessionId) return null;
  const r = record(records, event);
  FOLD[event.kind]?.(r, event);
  return r;
}

/**
 * The steer journal as far as events tell it: offset, state, turns; no text. In the mirror a
 * steer_accepted is the web tier's copy, appended a little after accept.lua ran, so a quick
 * turn end's steer_delivered can come before it: each event fills in its own part of the
 * steer, whichever arrives first.
 */
export function foldSteerEvent(steers, event) {
  const set = (offset, change) => {
    steers.set(offset, { offset, text: null, state: 'pending', ...steers.get(offset), ...change });
  };
  if (event.kind === 'steer_accepted') {
    set(event.offset, {
      turnId: event.turnId,
      clientMsgId: event.clientMsgId ?? null,
      acceptedAt: event.ts,
      state: steers.get(event.offset)?.state ?? 'pending',
    });
  } else if (event.kind === 'steer_delivered') {
    for (const offset of event.offsets || []) set(offset, { state: 'delivered', deliveredTurnId: event.turnId, deliveredAt: event.ts });
  } else if (event.kind === 'steer_undelivered') {
    for (const offset of event.offsets || []) set(offset, { state: 'undelivered' });
  } else if (event.kind === 'steer_retracted') {
    set(event.offset, { state: 'retracted' });
  }
}
