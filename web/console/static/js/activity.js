// The Session page's activity stream: each event as one readable line (what the agent said
// and did), in a scroll box of its own so nothing else on the page moves as events arrive.
//
// A session can have thousands of events: all are kept in memory, but only a window of the
// newest (WINDOW) is in the DOM; "Show earlier events" adds older ones a window at a time.
// While the reader is at the bottom the box follows new events; scrolled up, it stays put
// and a button counts what is new below.

import { clockTime, h, setText, severityBadge } from './dom.js';

export const WINDOW = 300;
const NEAR_BOTTOM_PX = 48;

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
const offsetsText = (offsets = []) => offsets.map((o) => `#${o}`).join(', ');
const tokens = (n) => (n || n === 0 ? Number(n).toLocaleString('en') : '?');

function more(summary, text) {
  if (!text) return null;
  return h('details', { class: 'more' }, h('summary', { text: summary }), h('pre', { class: 'wrap', text }));
}

function json(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

// What cut a turn short: an interrupt steer waiting undelivered, else a cancel this page sent
// or the record shows, else a cancel or the worker stopping (a warm shutdown hands it over).
// (The record may not show a cancel yet when the cut arrives: then both are named.)
const CUT_BY = { steer: 'an interrupt steer', cancel: 'the cancel', stop: 'a cancel, or its worker stopping' };

// kind -> (event, ctx) => [label, ...detail nodes]; ctx.stepTitle(stepId) names steps.
const DESCRIBE = {
  session_queued: (e) => ['Queued', `workflow ${e.workflowId}`, e.goal ? h('div', { class: 'quote', text: e.goal }) : null],
  session_forked: (e) => ['Forked', h('span', {}, 'from ', h('a', { class: 'mono', href: `/sessions/${encodeURIComponent(e.forkOf)}`, text: e.forkOf }), ` after turn ${e.turn}${e.conversationOnly ? ' (its conversation only: the same workspace)' : ''}`)],
  session_started: (e) => ['Started', `on ${e.worker}${e.attempt > 1 ? ` (attempt ${e.attempt})` : ''}`],
  session_resumed: (e) => ['Resumed', `from turn ${e.fromTurn} on ${e.worker}`],
  turn_started: (e) => ['Turn started', `turn ${e.turnId}`],
  turn_ended: (e, ctx) => ['Turn ended', turnEndText(e, ctx)],
  // "in" is the whole prompt (input + cache read + cache write: the API's input_tokens alone is
  // only what follows the last cache breakpoint, a handful), its cached part said after it
  llm_turn_completed: (e) => [
    'Model replied',
    `${e.stopReason || 'no stop reason'} · ${tokens((e.inputTokens || 0) + (e.cacheReadTokens || 0) + (e.cacheWriteTokens || 0))} in${e.cacheReadTokens ? ` (${tokens(e.cacheReadTokens)} cached)` : ''} · ${tokens(e.outputTokens)} out`,
    e.text ? h('div', { class: 'reply', text: e.text }) : null,
  ],
  tool_call_started: (e) => ['Tool call', h('code', { text: e.toolName }), e.inputSummary ? h('div', { class: 'quote mono', text: e.inputSummary }) : null],
  tool_call_completed: (e) => ['Tool done', h('code', { text: e.toolName }), ` · ${e.durationMs ?? '?'} ms`, toolResult(e.resultSummary)],
  tool_call_failed: (e) => ['Tool failed', h('code', { text: e.toolName }), e.error ? h('div', { class: 'quote error-text', text: e.error }) : null],
  step_advanced: (e, ctx) => (e.toStepId
    ? ['Step', `${e.stepIndex + 1}/${e.stepCount}${ctx.stepTitle(e.toStepId) ? `: ${ctx.stepTitle(e.toStepId)}` : ''}`, more('Notes on the step done', e.notes)]
    : ['Workflow done', `all ${e.stepCount} steps`, more('Notes on the last step', e.notes)]),
  steer_accepted: (e) => [e.mode === 'interrupt' ? 'Interrupt steer accepted' : 'Steer accepted', `#${e.offset}${e.turnId ? ` during turn ${e.turnId}` : ' (no live turn)'}`],
  steer_delivered: (e) => ['Steer delivered', `${offsetsText(e.offsets)} in turn ${e.turnId}`],
  steer_undelivered: (e) => ['Steer undelivered', `${offsetsText(e.offsets)} (the session ended first)`],
  steer_retracted: (e) => ['Steer retracted', `#${e.offset}`],
  steer_edited: (e) => ['Steer edited', `#${e.offset}`],
  issue_reported: (e) => ['Issue', severityBadge(e.severity), ` ${e.issueKind || ''}: `, h('span', { text: e.summary || '' })],
  agent_stuck: (e) => ['Stuck', e.reason || ''],
  model_retry: (e) => ['Model retry', `HTTP ${e.status ?? '?'}, attempt ${e.attempt ?? '?'}, waiting ${e.waitSeconds ?? '?'} s`],
  context_compacted: (e) => ['Compacted', `${tokens(e.beforeTokens)} → ${tokens(e.afterTokens)} tokens, ${plural(e.turnsSummarized || 0, 'turn')} summarised`],
  turn_interrupted: (e, ctx) => ['Interrupted', `turn ${e.turnId} (${CUT_BY[ctx.interrupted?.get(e.turnId)] || CUT_BY.cancel} cut it short)`],
  coordinator_signal: (e) => [e.wait ? 'Question' : 'Signal', `${e.signalKind} #${e.offset}: `, h('span', { text: e.summary || '' }), e.wait ? ' (waits for a reply)' : ''],
  children_spawned: (e) => ['Sub-agents', `${(e.children || []).length} child${(e.children || []).length === 1 ? '' : 'ren'}: `, (e.children || []).map((id) => h('a', { class: 'mono', href: `/sessions/${encodeURIComponent(id)}`, text: id })).flatMap((a, i) => (i ? [', ', a] : [a]))],
  session_completed: (e) => ['Session ended', `${e.status}: ${e.outcome}`, e.detail ? h('div', { class: 'quote', text: e.detail }) : null],
};

/** What a turn without tool calls ended in: an interrupt steer (the next call starts at once
 * with it), a cancel (the session ends) or a wait. */
function turnEndText(e, ctx) {
  if (e.toolCalls) return plural(e.toolCalls, 'tool call');
  const cause = ctx.interrupted?.get(e.turnId);
  if (cause === 'steer') return 'interrupted: the next model call starts with the steer';
  if (cause === 'cancel') return 'interrupted: the session was cancelled';
  if (cause === 'stop') return 'interrupted: cancelled, or its worker stopped (then it is handed over)';
  return 'no tool calls (waiting for a steer)';
}

/** A tool's result as the model saw it (its start, capped by the worker), folded away. */
function toolResult(text) {
  if (!text) return null;
  const firstLine = text.split('\n', 1)[0];
  const label = firstLine.length > 80 ? `${firstLine.slice(0, 80)}…` : firstLine || 'Result';
  return h('details', { class: 'more tool-result' }, h('summary', { text: `Result: ${label}` }), h('pre', { class: 'wrap', text }));
}

const HIDDEN_FIELDS = new Set(['kind', 'sessionId', 'ts', 'id']);

/** Any kind this console does not know yet: its name and its fields, as they are. */
function describeUnknown(event) {
  const fields = Object.fromEntries(Object.entries(event).filter(([key]) => !HIDDEN_FIELDS.has(key)));
  const compact = Object.keys(fields).length ? JSON.stringify(fields) : '';
  return [event.kind || 'event', compact.length <= 160 ? h('span', { class: 'mono', text: compact }) : more('Fields', json(fields))];
}

export function eventRow(event, ctx) {
  const describe = DESCRIBE[event.kind];
  const [label, ...detail] = describe ? describe(event, ctx) : describeUnknown(event);
  const turn = event.turnId ? `T${event.turnId}` : '';
  const ended = event.kind === 'session_completed' ? ` ended-${String(event.status || '').replace(/[^a-z]/g, '')}` : '';
  return h('li', { class: `ev kind-${String(event.kind || 'unknown').replace(/[^a-z0-9_-]/gi, '')}${ended}` },
    h('time', { class: 'clock', datetime: event.ts || null, text: clockTime(event.ts) }),
    h('span', { class: 'turn', text: turn, title: turn ? `turn ${event.turnId}` : null }),
    h('div', { class: 'what' }, h('span', { class: 'label', text: label }), ' ', detail));
}

export class ActivityLog {
  constructor({ labelledBy, ctx }) {
    // turnId -> what cut it short: 'steer' while an interrupt steer waits undelivered, else 'cancel'
    this.ctx = { interrupted: new Map(), ...ctx };
    this.interruptSteers = new Set(); // offsets of interrupt steers accepted, not yet delivered
    this.events = [];
    this.from = 0; // index of the first event in the DOM
    this.to = 0; // one past the last event in the DOM
    this.unseen = 0;
    this.frame = 0;
    this.list = h('ol', { class: 'events' });
    this.earlier = h('button', { type: 'button', class: 'earlier', hidden: true, onclick: () => this.showEarlier() });
    this.box = h('div', { class: 'activity', role: 'log', 'aria-labelledby': labelledBy, tabindex: '0' }, this.earlier, this.list);
    this.jump = h('button', { type: 'button', class: 'jump', hidden: true, onclick: () => this.toBottom() });
    this.summary = h('span', { class: 'activity-count' });
    this.empty = h('p', { class: 'activity-empty', text: 'No events yet.' });
    this.element = h('div', { class: 'activity-wrap' }, this.box, this.jump, this.empty);
    // Pinned: the box follows new events. Only the reader unpins it, by scrolling up (row
    // heights settling after a draw must not); back at the bottom, it is pinned again.
    this.pinned = true;
    this.pinnedTop = 0;
    this.box.addEventListener('scroll', () => {
      if (this.atBottom()) {
        this.pinned = true;
        this.hideJump();
      } else if (this.box.scrollTop < this.pinnedTop - 2) {
        this.pinned = false;
      }
      this.pinnedTop = this.pinned ? this.box.scrollTop : this.pinnedTop;
    }, { passive: true });
    this.resize = new ResizeObserver(() => {
      if (this.pinned) this.pin();
    });
    this.resize.observe(this.list);
  }

  pin() {
    this.box.scrollTop = this.box.scrollHeight;
    this.pinnedTop = this.box.scrollTop;
  }

  atBottom() {
    const { box } = this;
    return box.scrollHeight - box.scrollTop - box.clientHeight <= NEAR_BOTTOM_PX;
  }

  /** Add events (oldest first); the DOM catches up on the next frame. */
  push(events) {
    for (const event of events) {
      this.events.push(event);
      if (event.kind === 'steer_accepted' && event.mode === 'interrupt') this.interruptSteers.add(event.offset);
      if (event.kind === 'steer_delivered' || event.kind === 'steer_undelivered' || event.kind === 'steer_retracted') {
        for (const offset of event.offsets || [event.offset]) this.interruptSteers.delete(offset);
      }
      if (event.kind === 'turn_interrupted') {
        const cancelled = this.ctx.cancelRequested ? this.ctx.cancelRequested() : true;
        this.ctx.interrupted.set(event.turnId, this.interruptSteers.size ? 'steer' : cancelled ? 'cancel' : 'stop');
      }
    }
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    const following = this.pinned;
    const total = this.events.length;
    if (following && total - this.to > WINDOW) {
      // A backlog larger than the window (a long session opened): draw only its newest part.
      this.list.replaceChildren();
      this.from = total - WINDOW;
      this.to = this.from;
    }
    const rows = document.createDocumentFragment();
    for (let i = this.to; i < total; i += 1) rows.append(eventRow(this.events[i], this.ctx));
    const added = total - this.to;
    this.list.append(rows);
    this.to = total;
    if (following) {
      // Followed, the box holds the newest WINDOW events exactly, however the events were
      // batched into frames (a long session opened while events still arrive included).
      const extra = this.to - this.from - WINDOW;
      if (extra > 0) this.dropOldest(extra);
      this.pin();
    } else if (added) {
      this.unseen += added;
      this.jump.hidden = false;
      setText(this.jump, `↓ ${this.unseen} new event${this.unseen === 1 ? '' : 's'}`);
    }
    this.updateCounts();
  }

  dropOldest(count) {
    for (let i = 0; i < count; i += 1) this.list.firstElementChild?.remove();
    this.from += count;
  }

  showEarlier() {
    const start = Math.max(0, this.from - WINDOW);
    const rows = document.createDocumentFragment();
    for (let i = start; i < this.from; i += 1) rows.append(eventRow(this.events[i], this.ctx));
    const before = this.box.scrollHeight;
    this.list.prepend(rows);
    this.box.scrollTop += this.box.scrollHeight - before; // what was on screen stays on screen
    this.from = start;
    this.updateCounts();
  }

  toBottom() {
    this.pinned = true;
    this.pin();
    this.hideJump();
  }

  hideJump() {
    this.unseen = 0;
    this.jump.hidden = true;
  }

  updateCounts() {
    const total = this.events.length;
    this.empty.hidden = total > 0;
    this.earlier.hidden = this.from === 0;
    setText(this.earlier, `Show earlier events (${this.from.toLocaleString('en')} not shown)`);
    const shown = this.to - this.from;
    setText(this.summary, total ? `${total.toLocaleString('en')} event${total === 1 ? '' : 's'}${shown < total ? `, ${shown.toLocaleString('en')} shown` : ''}` : '');
  }

  stop() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.resize.disconnect();
  }
}
