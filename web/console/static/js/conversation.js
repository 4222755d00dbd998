// The Session page's conversation (README's Console): what the agent did, turn by turn, read from
// its checkpointed history (`GET /sessions/<id>/conversation`): the agent's text, each tool
// call with its input and its result (capped here, "Show all" expands it), thinking
// collapsed, and a mark where the history was compacted. One turn numbering (SPEC 3.6 v5):
// the turn ids are the API's (the record's, the events', the steer journal's), never counted
// here; each steer is shown just before the turn that read it. The live turn joins once its
// reply is journaled; until then its card says it runs.
// Every turn with a reply has "Fork from here" in its actions (README's Fork a session).

import { api } from './api.js';
import { errorText, h, randomId, setText, showOutcome, throttle } from './dom.js';

export const RESULT_PREVIEW_CHARS = 600; // a tool result longer than this shows its start
const INPUT_PREVIEW_CHARS = 600;

function json(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

// A long text, its start shown; "Show all (N characters)" toggles the whole.
export function capped(text, limit, cls, fullChars) {
  const pre = h('pre', { class: `wrap ${cls}` });
  const total = fullChars ?? text.length;
  if (text.length <= limit && total <= text.length) {
    setText(pre, text || '(empty)');
    return pre;
  }
  let open = false;
  const button = h('button', { type: 'button', class: 'link-button show-all' });
  const draw = () => {
    setText(pre, open ? text : `${text.slice(0, limit)}…`);
    const cut = total > text.length ? ` — the server keeps the first ${text.length.toLocaleString('en')}` : '';
    setText(button, open ? 'Show less' : `Show all (${total.toLocaleString('en')} characters${cut})`);
  };
  button.addEventListener('click', () => {
    open = !open;
    draw();
  });
  draw();
  return h('div', { class: 'capped' }, pre, button);
}

function thinking(block) {
  return h('details', { class: 'conv-thinking' },
    h('summary', { text: `Thinking (${block.thinking.length.toLocaleString('en')} characters)` }),
    h('pre', { class: 'wrap', text: block.thinking }));
}

function toolCall(use, result, fullChars) {
  const input = json(use.input);
  const state = !result ? 'pending' : result.is_error ? 'error' : 'ok';
  const node = h('div', { class: `conv-tool tool-${state}`, dataset: { toolUseId: use.id } },
    h('div', { class: 'conv-tool-head' },
      h('span', { class: 'conv-tool-name', text: use.name }),
      h('span', { class: `conv-tool-state state-${state}`, text: state === 'pending' ? 'no result (the turn was cut short or is running)' : state === 'error' ? 'error' : 'ok' })),
    h('div', { class: 'conv-label', text: 'Input' }),
    capped(input, INPUT_PREVIEW_CHARS, 'conv-input'));
  if (result) node.append(h('div', { class: 'conv-label', text: result.is_error ? 'Error' : 'Result' }), capped(result.content, RESULT_PREVIEW_CHARS, 'conv-result', fullChars));
  return node;
}

// A user message's own parts: the step prompts it delivered (meta) and any note WorkTrain
// added (a resume, a hand-over, a compaction) — what its text is once those and its steers are
// taken out. Its steers are placed by the turn that read them (steerNode).
function userParts(message) {
  const meta = message.meta || {};
  const nodes = [];
  for (const step of meta.steps || []) {
    nodes.push(h('details', { class: 'conv-step' }, h('summary', { text: 'Step instructions' }), h('pre', { class: 'wrap', text: step })));
  }
  for (const block of message.content) {
    if (block.type !== 'text') continue;
    let rest = block.text;
    for (const part of [...(meta.steps || []), ...(meta.steers || [])]) rest = rest.replace(part, '');
    rest = rest.trim();
    if (rest) nodes.push(h('div', { class: 'conv-note', text: rest }));
  }
  return nodes;
}

// A steer, just before the turn that read it (the steer journal's "delivered (turn N)").
function steerNode(steer) {
  const name = steer.offset ? `Steer #${steer.offset}` : 'Steer';
  const where = steer.turnId ? ` (turn ${steer.turnId})` : '';
  return h('div', { class: 'conv-steer', role: 'note', dataset: { offset: steer.offset ? String(steer.offset) : '' } },
    h('span', { class: 'conv-steer-label', text: `${name} delivered${where}` }),
    h('div', { class: 'conv-steer-text', text: steer.text }));
}

function compactionMark(message, c) {
  const text = message.content.filter((b) => b.type === 'text').map((b) => b.text).join('\n\n');
  const label = c ? `Compacted: ${c.turnsSummarized} earlier turn${c.turnsSummarized === 1 ? '' : 's'} summarised (${c.beforeTokens.toLocaleString('en')} → ${c.afterTokens.toLocaleString('en')} tokens)` : 'Compacted: the earlier turns were summarised';
  return h('div', { class: 'conv-compaction', role: 'separator' },
    h('span', { class: 'conv-compaction-label', text: label }),
    h('details', {}, h('summary', { text: 'The summary' }), h('pre', { class: 'wrap', text })));
}

// One turn's card: `article.conv-turn[data-turn=N]`, its head with a slot for per-turn actions
// (`turnActions(turn)`: nodes, e.g. "Fork from here"), then its body.
function turnCard(turn, state, body, turnActions) {
  const head = h('div', { class: 'conv-turn-head' },
    h('h3', { class: 'conv-turn-title', text: `Turn ${turn}` }),
    h('span', { class: 'conv-turn-actions' }, turnActions ? turnActions(turn, state) : null));
  return h('article', { class: `conv-turn conv-turn-${state}`, dataset: { turn: String(turn) }, 'aria-label': `Turn ${turn}` }, head, ...body);
}

// A turn id with no reply of its own: cut short before the model answered, or (after a worker
// died) the turn that finished the tool calls of the reply before it (docs/durability.md)
const NO_REPLY = 'No reply of its own: cut short before the model answered (an interrupt steer, a cancel, its worker stopping, a failed call), or, after a resume, it finished the tool calls of the turn before. The Activity list has its events.';

/**
 * messages (oldest first, each with the API's `turnId`) -> nodes, by turn: what a turn read
 * (step prompts, notes, steers — each steer before the turn that read it) just before its
 * card; a card per turn with the agent's text, thinking (collapsed) and each tool call with
 * its result; a card for a turn that left no reply (a gap in the ids) or runs now.
 * opts: compactions (context_compacted events, in order), turnCount and liveTurn (the
 * record's), turnActions(turn, state) for the per-turn action slot.
 */
export function renderConversation(messages, { compactions = [], turnCount = 0, liveTurn = 0, turnActions = null } = {}) {
  const results = new Map();
  const fullChars = new Map();
  for (const m of messages) {
    for (const b of m.content) if (b.type === 'tool_result') results.set(b.tool_use_id, b);
    for (const c of m.cut || []) fullChars.set(c.toolUseId, c.chars);
  }
  const before = new Map(); // turn id (or 'next': no turn read it yet) -> nodes
  const readBy = (turn, nodes) => {
    const key = turn ?? 'next';
    if (!before.has(key)) before.set(key, []);
    before.get(key).push(...nodes);
  };
  const anchors = []; // the cards and compaction marks, in history order
  for (const m of messages) {
    if (m.role === 'assistant' && m.meta?.summary) anchors.push({ summary: m });
    else if (m.role === 'assistant') anchors.push({ turn: m.turnId, message: m });
    else {
      readBy(m.turnId, userParts(m));
      for (const steer of m.steers || []) readBy(steer.turnId ?? m.turnId, [steerNode(steer)]);
    }
  }
  const nodes = [];
  const emitBefore = (key) => {
    const parts = before.get(key);
    before.delete(key);
    if (parts?.length) nodes.push(h('div', { class: 'conv-user', dataset: { readBy: String(key) } }, ...parts));
  };
  const emitUpTo = (turn) => {
    for (const key of [...before.keys()].filter((k) => k !== 'next' && k < turn).sort((a, b) => a - b)) emitBefore(key);
  };
  const empty = (turn) => (turn === liveTurn
    ? turnCard(turn, 'live', [h('p', { class: 'hint conv-live', text: 'Running: its reply shows here once the model answers (the Activity list follows it live).' })], turnActions)
    : turnCard(turn, 'empty', [h('p', { class: 'hint', text: NO_REPLY })], turnActions));
  const queue = [...compactions];
  let last = 0;
  let afterCompaction = false;
  anchors.forEach((a, i) => {
    if (a.summary) {
      const next = anchors.slice(i + 1).find((x) => !x.summary);
      emitUpTo(next ? next.turn : Infinity);
      nodes.push(compactionMark(a.summary, queue.shift()));
      afterCompaction = true;
      return;
    }
    const turn = a.turn ?? last + 1;
    if (!afterCompaction) for (let t = last + 1; t < turn; t += 1) {
      emitBefore(t);
      nodes.push(empty(t));
    }
    afterCompaction = false;
    emitUpTo(turn);
    emitBefore(turn);
    nodes.push(turnCard(turn, 'done', assistantBody(a.message, results, fullChars), turnActions));
    last = Math.max(last, turn);
  });
  const numbered = [...before.keys()].filter((k) => k !== 'next');
  const end = Math.max(turnCount, liveTurn, ...numbered, last);
  for (let t = last + 1; t <= end; t += 1) {
    emitBefore(t);
    nodes.push(empty(t));
  }
  emitBefore('next');
  return nodes;
}

function assistantBody(message, results, fullChars) {
  return message.content.map((b) => {
    if (b.type === 'text') return h('div', { class: 'conv-text', text: b.text });
    if (b.type === 'thinking') return thinking(b);
    if (b.type === 'tool_use') return toolCall(b, results.get(b.id), fullChars.get(b.id));
    return null;
  });
}

// "Fork from here": a new session that carries on after this turn (its history through it,
// its worktree as it was then), with an optional steer; its page opens once it is made.
function forkControl(base, turn, onForked) {
  const open = h('button', { type: 'button', class: 'link-button conv-fork-open', text: 'Fork from here', 'aria-label': `Fork from turn ${turn}` });
  const steer = h('textarea', { rows: '2', class: 'conv-fork-steer', placeholder: 'What the fork should do differently (optional)', 'aria-label': `Steer for the fork from turn ${turn}` });
  const submit = h('button', { type: 'submit', class: 'primary', text: 'Fork', 'aria-label': `Fork the session from turn ${turn}` });
  const close = h('button', { type: 'button', class: 'link-button', text: 'Cancel' });
  const outcome = h('p', { class: 'outcome', role: 'status' });
  const form = h('form', { class: 'conv-fork-form', hidden: true, novalidate: true }, steer, h('div', { class: 'form-actions' }, submit, close), outcome);
  open.addEventListener('click', () => { form.hidden = false; open.hidden = true; steer.focus(); });
  close.addEventListener('click', () => { form.hidden = true; open.hidden = false; });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    submit.disabled = true;
    const body = { turn };
    if (steer.value.trim()) body.steer = steer.value;
    try {
      const answer = await api('POST', `${base}/fork`, { body, extraHeaders: { 'Idempotency-Key': `console-fork-${randomId()}` } });
      onForked(answer.data.sessionId);
    } catch (error) {
      showOutcome(outcome, errorText(error), true);
    } finally {
      submit.disabled = false;
    }
  });
  return h('div', { class: 'conv-fork' }, open, form);
}

// The card: read again (throttled) when an event says the checkpoint moved; drawn again when
// the record's turns change (a turn starts, a running one ends without a reply).
export class ConversationView {
  constructor(base, { labelledBy, turnActions = null, onForked = null }) {
    this.base = base;
    // a turn's actions: the caller's, else "Fork from here" on every turn with a reply
    this.turnActions = turnActions
      ?? (onForked ? (turn, state) => (state === 'done' ? forkControl(base, turn, onForked) : null) : null);
    this.compactions = [];
    this.messages = null;
    this.turns = { turnCount: 0, liveTurn: 0 };
    this.list = h('div', { class: 'conv-list' });
    this.empty = h('p', { class: 'empty', text: 'Nothing yet: the first turn shows here once the model answers.' });
    this.problem = h('p', { class: 'problem', hidden: true });
    this.summary = h('span', { class: 'conv-count' });
    // its own scroll box (the page around it does not move), following the newest turn
    // while the reader is at the bottom
    this.box = h('div', { class: 'conv-scroll', tabindex: '0', 'aria-labelledby': labelledBy }, this.problem, this.empty, this.list);
    this.element = h('div', { class: 'conversation', 'aria-labelledby': labelledBy }, this.box);
    this.refresh = throttle(() => this.load(), 1000);
  }

  atBottom() {
    const { box } = this;
    return box.scrollHeight - box.scrollTop - box.clientHeight <= 48;
  }

  async load() {
    try {
      this.messages = (await api('GET', `${this.base}/conversation`)).data.messages;
      this.draw();
      this.problem.hidden = true;
    } catch (error) {
      if (error.status === 404) return;
      this.problem.hidden = false;
      setText(this.problem, `Could not read the conversation — ${error.message || error}`);
    }
  }

  draw() {
    if (!this.messages) return;
    const nodes = renderConversation(this.messages, { compactions: this.compactions, turnActions: this.turnActions, ...this.turns });
    const follow = this.atBottom();
    const top = this.box.scrollTop;
    this.list.replaceChildren(...nodes);
    this.box.scrollTop = follow && this.drawn ? this.box.scrollHeight : top;
    this.drawn = true;
    this.empty.hidden = nodes.length > 0;
    const turns = this.list.querySelectorAll('.conv-turn').length;
    setText(this.summary, turns ? `${turns} turn${turns === 1 ? '' : 's'}${this.turns.liveTurn ? ` · turn ${this.turns.liveTurn} running` : ''}` : '');
    this.list.dispatchEvent(new CustomEvent('conversation-drawn', { bubbles: true }));
  }

  // Every event of the session: the ones that move the checkpoint read it again.
  onEvent(event) {
    if (event.kind === 'context_compacted') this.compactions.push(event);
    if (['turn_started', 'llm_turn_completed', 'turn_ended', 'context_compacted', 'session_completed', 'session_resumed', 'steer_delivered'].includes(event.kind)) this.refresh();
  }

  record(r) {
    const turns = { turnCount: r.turnCount || 0, liveTurn: r.turnId || 0 };
    if (turns.turnCount === this.turns.turnCount && turns.liveTurn === this.turns.liveTurn) return;
    this.turns = turns;
    this.draw();
  }

  stop() {
    this.refresh.stop();
  }
}
