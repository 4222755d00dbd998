// The Session page's conversation (README's Console): what the agent did, turn by turn, read from
// its checkpointed history (`GET /sessions/<id>/conversation`): the agent's text, each tool
// call with its input and its result (capped here, "Show all" expands it), the steers inline
// in the message that delivered them, thinking collapsed, and a mark where the history was
// compacted. The live turn joins when it is checkpointed; until then a line says it runs.
// Every turn has "Fork from here" (README's Fork a session).

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

// A user message's text: the step prompts and steers it delivered (meta), and any note
// WorkTrain added (a resume, a hand-over, a compaction) — what is left once those are taken out.
function delivered(message, steerOffsets) {
  const meta = message.meta || {};
  const nodes = [];
  for (const step of meta.steps || []) {
    nodes.push(h('details', { class: 'conv-step' }, h('summary', { text: 'Step instructions' }), h('pre', { class: 'wrap', text: step })));
  }
  for (const text of meta.steers || []) {
    const offset = steerOffsets.get(text);
    nodes.push(h('div', { class: 'conv-steer', role: 'note' },
      h('span', { class: 'conv-steer-label', text: offset === undefined ? 'Steer delivered' : `Steer #${offset} delivered` }),
      h('div', { class: 'conv-steer-text', text })));
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

function compactionMark(message, c) {
  const text = message.content.filter((b) => b.type === 'text').map((b) => b.text).join('\n\n');
  const label = c ? `Compacted: ${c.turnsSummarized} earlier turn${c.turnsSummarized === 1 ? '' : 's'} summarised (${c.beforeTokens.toLocaleString('en')} → ${c.afterTokens.toLocaleString('en')} tokens)` : 'Compacted: the earlier turns were summarised';
  return h('div', { class: 'conv-compaction', role: 'separator' },
    h('span', { class: 'conv-compaction-label', text: label }),
    h('details', {}, h('summary', { text: 'The summary' }), h('pre', { class: 'wrap', text })));
}

// messages (oldest first) -> nodes: a turn per assistant message, the results of its tool
// calls (in the next user message) under each call, that message's deliveries after the turn.
// `forkFrom(turn)`: the "Fork from here" control of a turn (README's Fork a session), or none.
export function renderConversation(messages, { steerOffsets = new Map(), compactions = [], forkFrom = null } = {}) {
  const results = new Map();
  const fullChars = new Map();
  for (const m of messages) {
    for (const b of m.content) if (b.type === 'tool_result') results.set(b.tool_use_id, b);
    for (const c of m.cut || []) fullChars.set(c.toolUseId, c.chars);
  }
  const queue = [...compactions];
  const nodes = [];
  let turn = 0;
  messages.forEach((m, i) => {
    if (m.role === 'assistant' && m.meta?.summary) {
      const c = queue.shift();
      nodes.push(compactionMark(m, c));
      turn += c ? c.turnsSummarized : 0; // the turns it summarised keep their numbers
      return;
    }
    if (m.role === 'user') {
      const parts = delivered(m, steerOffsets);
      if (parts.length) nodes.push(h('div', { class: i === 0 ? 'conv-user conv-first' : 'conv-user' }, ...parts));
      return;
    }
    turn += 1;
    const id = m.turnId ?? turn; // the server's numbering (the record's, the events'), else the count
    const body = m.content.map((b) => {
      if (b.type === 'text') return h('div', { class: 'conv-text', text: b.text });
      if (b.type === 'thinking') return thinking(b);
      if (b.type === 'tool_use') return toolCall(b, results.get(b.id), fullChars.get(b.id));
      return null;
    });
    nodes.push(h('article', { class: 'conv-turn', dataset: { turn: String(id) } },
      h('h3', { class: 'conv-turn-head', text: `Turn ${id}` }), ...body, forkFrom ? forkFrom(id) : null));
  });
  return nodes;
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

// The card: read again (throttled) when an event says the checkpoint moved.
export class ConversationView {
  constructor(base, { labelledBy, onForked = null }) {
    this.base = base;
    this.forkFrom = onForked ? (turn) => forkControl(base, turn, onForked) : null;
    this.steerOffsets = new Map();
    this.compactions = [];
    this.list = h('div', { class: 'conv-list' });
    this.live = h('p', { class: 'hint conv-live', hidden: true });
    this.empty = h('p', { class: 'empty', text: 'Nothing yet: the first turn shows here once it ends.' });
    this.problem = h('p', { class: 'problem', hidden: true });
    this.element = h('div', { class: 'conversation', 'aria-labelledby': labelledBy }, this.problem, this.empty, this.list, this.live);
    this.refresh = throttle(() => this.load(), 1000);
  }

  async load() {
    try {
      const data = (await api('GET', `${this.base}/conversation`)).data;
      this.list.replaceChildren(...renderConversation(data.messages, { steerOffsets: this.steerOffsets, compactions: this.compactions, forkFrom: this.forkFrom }));
      this.empty.hidden = data.messages.length > 0;
      this.problem.hidden = true;
    } catch (error) {
      if (error.status === 404) return;
      this.problem.hidden = false;
      setText(this.problem, `Could not read the conversation — ${error.message || error}`);
    }
  }

  // Every event of the session: the ones that move the checkpoint read it again.
  onEvent(event) {
    if (event.kind === 'context_compacted') this.compactions.push(event);
    if (['turn_ended', 'context_compacted', 'session_completed', 'session_resumed', 'steer_delivered'].includes(event.kind)) this.refresh();
  }

  steers(steers) {
    for (const s of steers) if (s.text) this.steerOffsets.set(s.text, s.offset);
  }

  record(r) {
    this.live.hidden = !r.turnId;
    setText(this.live, r.turnId ? `Turn ${r.turnId} is running: it shows here when it ends (the Activity list follows it live).` : '');
  }

  stop() {
    this.refresh.stop();
  }
}
