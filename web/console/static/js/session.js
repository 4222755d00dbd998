// Session page (`/sessions/<id>`): led by the conversation (SPEC 3.6 v5), with the activity
// stream beside it, the record above (model, thinking budget and cost in full), the steer
// journal ("Steers"), Sub-agents and Webhooks below, and the steer box docked at the bottom of
// the window, always in view. All live from the session's own event stream (SSE): each event
// marks the record (and, for steer events, the journal) stale; they are read again at most
// every 700 ms / 300 ms, so the page shows the server's state.

import { ActivityLog } from './activity.js';
import { api, follow, poll, workflows } from './api.js';
import { ConversationView } from './conversation.js';
import { FINISHED, errorText, h, liveIndicator, notFoundPage, randomId, setText, showOutcome, startClock, statusBadge, throttle, timeElement, updateTime } from './dom.js';
import { foldSessionEvent, foldSteerEvent } from './mirror.js';
import { stepText } from './sessions.js';
import { questionBanner, treeView } from './subagents.js';
import { webhooksCard } from './webhooks.js';

const STEER_KINDS = new Set(['steer_accepted', 'steer_delivered', 'steer_undelivered', 'steer_retracted', 'steer_edited']);
const STEERS_PAGE = 1000; // the server's largest page of the journal
// [key, label, class]: the first group is always shown (live state and what the session
// runs, in full), the rest under "More". `wide` spans the row; `full` wraps, never cut.
const RECORD_FIELDS = [
  ['status', 'Status'],
  ['turn', 'Live turn'],
  ['step', 'Step', 'full'],
  ['pending', 'Pending steers'],
  ['created', 'Created'],
  ['workflow', 'Workflow', 'full'],
  ['model', 'Model', 'full span2'],
  ['thinking', 'Thinking budget', 'full'],
  ['cost', 'Cost', 'full'],
  ['usage', 'Tokens', 'full span2'],
  ['waiting', 'Waiting for'],
  ['retries', 'Retries'],
  ['goal', 'Goal', 'wide'],
  ['outcome', 'Outcome', 'wide'],
];
const MORE_FIELDS = [
  ['delivery', 'Delivery', 'wide'],
  ['workspace', 'Workspace', 'wide'],
  ['output', 'Max output', 'full'],
  ['started', 'Started'],
  ['ended', 'Ended'],
  ['worker', 'Worker', 'full span2'],
];
// "The session has completed", "... was cancelled": how the form says it takes no more steers.
const ENDED = { completed: 'The session has completed', failed: 'The session has failed', cancelled: 'The session was cancelled' };

export function steerState(steer) {
  if (steer.state === 'delivered') return steer.deliveredTurnId ? `delivered (turn ${steer.deliveredTurnId})` : 'delivered';
  return steer.state;
}

function recordView() {
  const values = {};
  const pairs = (fields) => fields.map(([key, label, kind]) => {
    values[key] = h('dd', { class: `field-${key}` });
    return h('div', { class: kind ? `pair ${kind}` : 'pair' }, h('dt', { text: label }), values[key]);
  });
  const list = h('div', {},
    h('dl', { class: 'record' }, pairs(RECORD_FIELDS)),
    h('details', { class: 'record-more' }, h('summary', { text: 'More' }), h('dl', { class: 'record' }, pairs(MORE_FIELDS))));
  for (const key of ['created', 'started', 'ended']) values[key].append(timeElement(null));
  return { list, values };
}

const count = (v) => Number(v || 0).toLocaleString('en');

/** "9,350 in (9,341 cache read · 6 cache write · 3 uncached) · 56 out": the running sums over
 * every attempt; "in" is every prompt token (the API's input_tokens are only the uncached ones). */
export function usageText(r) {
  if (r.inputTokens === undefined && r.outputTokens === undefined) return '—';
  const prompt = Number(r.inputTokens || 0) + Number(r.cacheReadTokens || 0) + Number(r.cacheWriteTokens || 0);
  return `${count(prompt)} in (${count(r.cacheReadTokens)} cache read · ${count(r.cacheWriteTokens)} cache write · ${count(r.inputTokens)} uncached) · ${count(r.outputTokens)} out`;
}

/** "$0.012345", or why there is none (a model the price table does not know). */
export function costText(r) {
  if (typeof r.costUsd === 'number') return `$${r.costUsd.toFixed(6)}`;
  const model = r.agentConfig?.model;
  if (!r.inputTokens && !r.outputTokens) return '$0 (no model call yet)';
  return model ? `unknown: ${model} is not in the price table` : 'unknown';
}

/** "8,000 tokens", "off" (0), or the environment's default. */
export function thinkingText(r) {
  const budget = r.agentConfig?.thinkingBudgetTokens;
  if (budget === undefined || budget === null) return 'the worker\'s default';
  return budget === 0 ? 'off' : `${count(budget)} tokens`;
}

// README's Coding sessions: what a worktree session's end did with its work (branch, commit, push, diff stat)
export function deliveryText(r) {
  const d = r.delivery;
  if (!d) return r.branchStrategy && r.branchStrategy !== 'none' ? `${r.branchStrategy} (not delivered yet)` : '—';
  const parts = [d.state, `branch ${d.branch}`];
  if (d.headCommit) parts.push(`commit ${d.headCommit.slice(0, 12)} (${d.commits} since ${d.baseCommit ? d.baseCommit.slice(0, 12) : d.baseRef})`);
  parts.push(d.pushed ? `pushed to ${d.remote}` : 'not pushed');
  if (d.worktree) parts.push(`worktree kept: ${d.worktree}`);
  if (d.error) parts.push(`error: ${d.error}`);
  return parts.join(' · ');
}

function fillDelivery(cell, r) {
  const text = deliveryText(r);
  const stat = r.delivery && r.delivery.diffStat ? r.delivery.diffStat : '';
  if (cell.dataset.text === text + stat) return;
  cell.dataset.text = text + stat;
  cell.replaceChildren(h('span', { text }), stat ? h('pre', { class: 'diffstat', text: stat }) : '');
}

function fillRecord({ values }, r, title) {
  if (values.status.dataset.status !== r.status) {
    values.status.dataset.status = r.status;
    values.status.replaceChildren(statusBadge(r.status));
  }
  setText(values.workflow, r.workflowId);
  const step = stepText(r);
  setText(values.step, title && step !== '—' ? `${step} · ${title}` : step);
  values.step.title = title || '';
  setText(values.turn, r.turnId ? `${r.turnId} (${r.turnCount} so far)` : `none (${r.turnCount || 0} so far)`);
  setText(values.pending, String(r.pendingSteers || 0));
  setText(values.waiting, r.waitingFor || '—');
  setText(values.goal, r.goal || '—');
  values.goal.title = r.goal || '';
  setText(values.workspace, r.workspacePath || '—');
  updateTime(values.created.firstChild, r.createdAt);
  updateTime(values.started.firstChild, r.startedAt);
  updateTime(values.ended.firstChild, r.endedAt);
  setText(values.outcome, r.outcome ? `${r.outcome}${r.outcomeDetail ? ` — ${r.outcomeDetail}` : ''}` : '—');
  values.outcome.parentElement.hidden = !r.outcome; // a row of its own once the session ended
  values.outcome.title = r.outcomeDetail || '';
  setText(values.worker, r.worker ? `${r.worker}${r.attempt > 1 ? ` (attempt ${r.attempt})` : ''}` : '—');
  setText(values.model, r.agentConfig?.model || 'the worker\'s default');
  setText(values.thinking, thinkingText(r));
  setText(values.output, r.agentConfig?.maxOutputTokens ? `${count(r.agentConfig.maxOutputTokens)} tokens` : 'the worker\'s default');
  setText(values.cost, costText(r));
  values.cost.classList.toggle('unknown-cost', typeof r.costUsd !== 'number' && Boolean(r.inputTokens || r.outputTokens));
  setText(values.usage, usageText(r));
  fillDelivery(values.delivery, r);
}

function steerRow(steer, retract, edit) {
  const button = h('button', { type: 'button', class: 'small', text: 'Retract', onclick: () => retract(steer.offset, button) });
  const editButton = h('button', { type: 'button', class: 'small', text: 'Edit', 'aria-label': `Edit steer ${steer.offset}`, onclick: () => edit(steer.offset, row) });
  const row = h('tr', { dataset: { offset: String(steer.offset) } },
    h('td', { class: 'col-num', text: String(steer.offset) }),
    h('td', { class: 'col-state' }),
    h('td', { class: 'col-text' }, h('span', { class: 'mode-interrupt', text: 'interrupt', title: 'an interrupt steer: it cut the live turn short', hidden: true }), h('div', { class: 'clamp' })),
    h('td', { class: 'col-num col-turn' }),
    h('td', { class: 'col-action' }, button, editButton));
  return row;
}

function fillSteerRow(row, steer, readOnly) {
  const [, state, text, turn, action] = row.cells;
  setText(state, steerState(steer));
  state.dataset.state = steer.state;
  const [mark, body] = text.children;
  mark.hidden = steer.mode !== 'interrupt';
  if (!row.dataset.editing) {
    setText(body, steer.text ?? '(text not in the event mirror)');
    body.classList.toggle('muted', steer.text === null || steer.text === undefined);
  }
  setText(turn, steer.turnId ? String(steer.turnId) : '—');
  const pending = !readOnly && steer.state === 'pending';
  for (const button of action.children) button.hidden = !pending;
  if (!pending && row.dataset.editing) row.closeEditor?.();
}

const SESSION_ID = /^sess_[0-9A-HJKMNP-TV-Z]{26}$/;

/** `/sessions/…08KHC25MX27V` (a shortened id, as `worktrain top` and a phone show it): the one
 * session whose id starts or ends with it (the API resolves it), else a not-found page. */
function shortIdPage(container, fragment, navigate) {
  let stopped = false;
  container.append(h('section', { class: 'page' }, h('p', { class: 'hint', text: `Looking for the session ${fragment}…` })));
  api('GET', `/sessions?id=${encodeURIComponent(fragment)}&limit=10`).then((body) => {
    if (stopped) return;
    const ids = body.data.sessions.map((s) => s.sessionId);
    if (ids.length === 1) navigate(`/sessions/${encodeURIComponent(ids[0])}`, { replace: true });
    else notFoundPage(container, ids.length ? `${fragment} is the start or end of ${ids.length} sessions: ${ids.join(', ')}.` : `There is no session ${fragment} here: no session id starts or ends with it.`);
  }).catch((error) => {
    if (stopped) return;
    const hint = /^sess_/.test(fragment) ? '' : ' (session ids start with sess_)';
    notFoundPage(container, error.status === 400 ? `There is no session ${fragment} here${hint}.` : errorText(error));
  });
  return () => {
    stopped = true;
  };
}

export function sessionPage(container, { params, config, navigate }) {
  const sessionId = params[0];
  const readOnly = config.readOnly;
  if (!readOnly && !SESSION_ID.test(sessionId)) return shortIdPage(container, sessionId, navigate);
  const base = `/sessions/${encodeURIComponent(sessionId)}`;
  const live = liveIndicator();
  const headBadge = h('span', { class: 'head-status' });
  const problem = h('p', { class: 'problem', role: 'alert', hidden: true });
  const record = recordView();
  let current = null; // the latest record
  let titles = new Map(); // stepId -> title, for this session's workflow

  // --- cancel (with confirmation) ---
  const cancelButton = h('button', { type: 'button', class: 'danger', text: 'Cancel session' });
  const cancelOutcome = h('p', { class: 'outcome', role: 'status', 'aria-label': 'Cancel outcome' });
  const confirmButton = h('button', { type: 'button', class: 'danger', text: 'Yes, cancel it' });
  const keepButton = h('button', { type: 'button', text: 'Keep it running' });
  const dialog = h('dialog', { class: 'confirm', 'aria-labelledby': 'cancel-title' },
    h('h2', { id: 'cancel-title', text: 'Cancel this session?' }),
    h('p', { text: 'The agent stops within seconds: the live turn is cut short (a model call in flight is abandoned, a running command stopped). Steers not yet delivered are recorded as undelivered.' }),
    h('div', { class: 'form-actions' }, keepButton, confirmButton));

  // --- the steer form ---
  const steerText = h('textarea', { id: 'steer-text', rows: '2', required: true, placeholder: 'What the agent should know or do next' });
  const expected = h('input', { id: 'steer-turn', type: 'number', min: '0', step: '1', inputmode: 'numeric', placeholder: 'any' });
  const liveTurn = h('span', { class: 'hint live-turn', id: 'steer-turn-hint' });
  expected.setAttribute('aria-describedby', 'steer-turn-hint');
  // README's Managing steers: cut the live turn short (the model call in flight is abandoned) and deliver now
  const interrupt = h('input', { id: 'steer-interrupt', type: 'checkbox' });
  const sendButton = h('button', { type: 'submit', class: 'primary', text: 'Send steer' });
  const steerOutcome = h('p', { class: 'outcome', role: 'status', 'aria-label': 'Steer outcome' });
  const formNote = h('p', { class: 'hint form-note' });
  const form = h('form', { class: 'steer-form', novalidate: true },
    h('label', { for: 'steer-text', text: 'Steer' }),
    steerText,
    h('div', { class: 'steer-row' },
      h('span', { class: 'field-inline' }, h('label', { for: 'steer-turn', text: 'Expected turn' }), expected, liveTurn),
      h('span', { class: 'field-inline' }, interrupt, h('label', { for: 'steer-interrupt', text: 'Interrupt the live turn' })),
      sendButton),
    h('div', { class: 'form-status' }, steerOutcome, formNote));

  // --- the journal ---
  const steersBody = h('tbody');
  const steersEmpty = h('p', { class: 'empty', text: 'No steers yet.' });
  const steersTable = h('table', { class: 'data steers', 'aria-labelledby': 'steers-title' },
    h('thead', {}, h('tr', {},
      h('th', { scope: 'col', class: 'col-num', text: 'Offset' }),
      h('th', { scope: 'col', class: 'col-state', text: 'State' }),
      h('th', { scope: 'col', class: 'col-text', text: 'Text' }),
      h('th', { scope: 'col', class: 'col-num col-turn', text: 'Turn', title: 'the live turn when it was accepted' }),
      h('th', { scope: 'col', class: 'col-action' }, h('span', { class: 'sr-only', text: 'Actions' })))),
    steersBody);

  const tree = treeView();
  const hooks = webhooksCard(base); // README's Webhooks: this session's webhook deliveries
  const question = questionBanner(base, () => refreshRecord());
  const retriesSeen = { count: 0 };
  const dispatchAgain = h('a', { href: '/dispatch', class: 'dispatch-again', text: 'Dispatch again', title: 'A new session of the same workflow, goal and workspace (the form opens filled in)' });
  const conversation = new ConversationView(base, { labelledBy: 'conversation-title', onForked: (id) => navigate(`/sessions/${encodeURIComponent(id)}`) });
  const activity = new ActivityLog({ labelledBy: 'activity-title', ctx: { stepTitle: (id) => titles.get(id) || '', cancelRequested: () => cancelSent || Boolean(current?.cancelRequested) } });
  let cancelSent = false; // this page sent the cancel: a cut that follows is the cancel's

  // The steer box, docked: the page's last child, sticky at the window's bottom (always in view).
  const dock = readOnly
    ? h('div', { class: 'steer-dock' }, h('p', { class: 'notice', text: 'Read-only console (standalone, no Redis): steering needs worktrain web with Redis.' }))
    : h('section', { class: 'steer-dock', 'aria-label': 'Steer the agent' }, form);
  container.append(h('section', { class: 'page session-page' },
    h('div', { class: 'page-head' },
      h('h1', { tabindex: '-1' }, 'Session ', h('code', { class: 'session-id', text: sessionId })),
      headBadge, live,
      h('div', { class: 'head-actions' },
        readOnly ? null : cancelButton,
        readOnly ? null : dispatchAgain,
        h('a', { href: `/issues?session=${encodeURIComponent(sessionId)}`, text: 'Issues of this session' }))),
    readOnly ? null : cancelOutcome,
    problem,
    readOnly ? null : question.element,
    h('section', { class: 'card session-record', 'aria-labelledby': 'record-title' },
      h('h2', { id: 'record-title', class: 'sr-only', text: 'Record' }),
      record.list),
    h('div', { class: 'session-grid' },
      readOnly ? null : h('section', { class: 'card session-conversation', 'aria-labelledby': 'conversation-title' },
        h('div', { class: 'section-head' }, h('h2', { id: 'conversation-title', text: 'Conversation' }), conversation.summary),
        conversation.element),
      h('section', { class: 'card session-activity', 'aria-labelledby': 'activity-title' },
        h('div', { class: 'section-head' }, h('h2', { id: 'activity-title', text: 'Activity' }), activity.summary),
        activity.element)),
    h('section', { class: 'card session-steers', 'aria-labelledby': 'steers-title' },
      h('h2', { id: 'steers-title', text: 'Steers' }),
      h('div', { class: 'table-wrap steers-wrap' }, steersTable),
      steersEmpty),
    readOnly ? null : h('div', { class: 'session-more' }, tree.element, hooks.element),
    dock,
    readOnly ? null : dialog));

  const showProblem = (text) => {
    problem.hidden = !text;
    setText(problem, text || '');
  };

  const drawRecord = (r) => {
    current = r;
    const title = r.stepTitle || titles.get(r.stepId) || '';
    fillRecord(record, r, title);
    headBadge.replaceChildren(statusBadge(r.status));
    tree.update(r);
    question.update(r);
    conversation.record(r);
    const finished = FINISHED.has(r.status);
    cancelButton.disabled = finished;
    sendButton.disabled = finished;
    setText(liveTurn, r.turnId ? `live turn: ${r.turnId}` : 'no live turn');
    setText(formNote, finished ? `${ENDED[r.status] || `The session is ${r.status}`}: it takes no more steers.` : 'Ctrl+Enter sends. Without an expected turn the steer reaches the next turn end.');
    setText(record.values.retries, String(retriesSeen.count));
    const again = new URLSearchParams({ workflow: r.workflowId || '', goal: r.goal || '', workspace: r.workspacePath || '' });
    dispatchAgain.href = `/dispatch?${again}`;
  };

  const drawSteers = (steers) => {
    const rows = new Map([...steersBody.rows].map((row) => [row.dataset.offset, row]));
    for (const steer of steers) {
      let row = rows.get(String(steer.offset));
      if (!row) {
        row = steerRow(steer, retract, edit);
        steersBody.append(row);
      }
      fillSteerRow(row, steer, readOnly);
    }
    steersEmpty.hidden = steers.length > 0;
  };

  // --- reading: the API (daemon) or the mirrors (standalone) ---
  let stopStream = () => {};
  let refreshRecord = Object.assign(() => {}, { stop() {} });
  let refreshSteers = Object.assign(() => {}, { stop() {} });
  // An unknown session is a not-found page, not an empty session page under a banner.
  const notFound = () => {
    stopStream();
    const hint = /^sess_/.test(sessionId) ? '' : ' (session ids start with sess_)';
    notFoundPage(container, `There is no session ${sessionId} here${readOnly ? ' (not in the event mirror)' : ''}${hint}.`);
  };

  const loadTitles = async (workflowId) => {
    try {
      const flow = (await workflows()).workflows.find((w) => w.id === workflowId);
      titles = new Map((flow?.steps || []).map((s) => [s.id, s.title]));
    } catch {
      titles = new Map();
    }
  };

  if (!readOnly) {
    const loadRecord = async () => {
      try {
        const r = (await api('GET', base)).data;
        if (!titles.size) await loadTitles(r.workflowId);
        drawRecord(r);
        hooks.update(r);
        showProblem('');
      } catch (error) {
        if (error.status === 404) notFound();
        else showProblem(`Could not read the session — ${errorText(error)}`);
      }
    };
    refreshRecord = throttle(loadRecord, 700);
    const readSteers = async () => {
      const all = [];
      for (let since = 0; ; ) {
        const page = (await api('GET', `${base}/steers?since=${since}&limit=${STEERS_PAGE}`)).data;
        all.push(...page.steers);
        if (page.steers.length < STEERS_PAGE) return all;
        since = page.next;
      }
    };
    refreshSteers = throttle(async () => {
      try {
        drawSteers(await readSteers());
      } catch (error) {
        if (error.status !== 404) showProblem(`Could not read the steers — ${errorText(error)}`);
      }
    }, 300);
    const start = () => follow(`${base}/events`, {
      onEvent: (event) => {
        activity.push([event]);
        conversation.onEvent(event);
        if (event.kind === 'model_retry') {
          retriesSeen.count += 1;
          setText(record.values.retries, String(retriesSeen.count));
        }
        refreshRecord();
        if (STEER_KINDS.has(event.kind)) refreshSteers();
      },
      onOpen: () => {
        refreshRecord();
        refreshSteers();
        conversation.refresh();
      },
      onError: (error) => (error.status === 404 ? notFound() : showProblem(errorText(error))),
      onState: (state) => {
        live.set(state);
        if (state === 'reconnecting') {
          refreshRecord(); // no stream for now: read at each retry (>= 2 s apart)
          refreshSteers();
        }
      },
      isFinal: (event) => event.kind === 'session_completed',
      shouldReconnect: () => !(current && FINISHED.has(current.status)),
    });
    // The stream starts once the record (and so its workflow's step titles) has been read,
    // so that the first events are drawn with their step titles.
    let stopped = false;
    let stopFollow = () => {};
    stopStream = () => {
      stopped = true;
      stopFollow();
    };
    refreshSteers();
    loadRecord().finally(() => {
      if (!stopped) stopFollow = start();
    });
  } else {
    const records = new Map();
    const steers = new Map();
    stopStream = poll(`/events?sessionId=${encodeURIComponent(sessionId)}`, {
      items: 'events',
      onBatch: async (events) => {
        for (const event of events) {
          foldSessionEvent(records, event);
          foldSteerEvent(steers, event);
        }
        const r = records.get(sessionId);
        if (r && !titles.size) await loadTitles(r.workflowId);
        activity.push(events);
        if (r) drawRecord(r);
        drawSteers([...steers.values()].sort((a, b) => a.offset - b.offset));
      },
      onCaughtUp: () => {
        if (!records.has(sessionId)) notFound();
      },
      onState: live.set,
    });
  }

  // --- actions ---
  async function retract(offset, button) {
    button.disabled = true;
    try {
      const body = await api('DELETE', `${base}/steers/${offset}`);
      showOutcome(steerOutcome, `${body.status || 'retracted'}: offset ${offset}`, false);
    } catch (error) {
      showOutcome(steerOutcome, errorText(error), true);
    } finally {
      button.disabled = false;
      refreshSteers();
      refreshRecord();
    }
  }

  // Edit a pending steer in place (README's Managing steers: PATCH, same offset, atomic with the drain).
  function edit(offset, row) {
    if (row.dataset.editing) return;
    const textCell = row.cells[2];
    const body = textCell.children[1];
    const box = h('textarea', { class: 'edit-box', 'aria-label': `New text of steer ${offset}` });
    box.value = body.textContent;
    const close = () => {
      delete row.dataset.editing;
      row.closeEditor = null;
      editor.remove();
      body.hidden = false;
    };
    const save = h('button', { type: 'button', class: 'small primary', text: 'Save' });
    const cancel = h('button', { type: 'button', class: 'small', text: 'Cancel edit', onclick: close });
    const editor = h('div', { class: 'editor' }, box, h('div', { class: 'edit-actions' }, cancel, save));
    save.addEventListener('click', async () => {
      if (!box.value.trim()) {
        showOutcome(steerOutcome, 'invalid_request: text is required and must be a non-empty string.', true);
        return;
      }
      save.disabled = true;
      try {
        const answer = await api('PATCH', `${base}/steers/${offset}`, { body: { text: box.value } });
        showOutcome(steerOutcome, `${answer.status || 'edited'}: offset ${offset}`, false);
        setText(body, box.value);
        close();
      } catch (error) {
        showOutcome(steerOutcome, errorText(error), true);
        save.disabled = false;
        if (error.status === 409) close();
      } finally {
        refreshSteers();
      }
    });
    row.dataset.editing = '1';
    row.closeEditor = close;
    body.hidden = true;
    textCell.append(editor);
    box.focus();
  }

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (sendButton.disabled) return; // one in flight (Ctrl+Enter again), or the session ended
    const text = steerText.value;
    if (!text.trim()) {
      showOutcome(steerOutcome, 'invalid_request: text is required and must be a non-empty string.', true);
      steerText.focus();
      return;
    }
    const body = { text, clientMsgId: `console-${randomId()}` };
    if (expected.value !== '') {
      const turn = Number(expected.value);
      if (!Number.isInteger(turn) || turn < 0) {
        showOutcome(steerOutcome, 'invalid_request: Expected turn must be a whole number (or empty for any turn).', true);
        expected.focus();
        return;
      }
      body.expectedTurnId = turn;
    }
    if (interrupt.checked) body.mode = 'interrupt';
    sendButton.disabled = true;
    try {
      const answer = await api('POST', `${base}/steer`, { body });
      showOutcome(steerOutcome, `${answer.status}: offset ${answer.steer.offset}`, false);
      steerText.value = '';
      interrupt.checked = false;
      refreshSteers();
      refreshRecord();
    } catch (error) {
      showOutcome(steerOutcome, errorText(error), true);
    } finally {
      sendButton.disabled = Boolean(current && FINISHED.has(current.status));
    }
  });
  steerText.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  cancelButton.addEventListener('click', () => dialog.showModal());
  keepButton.addEventListener('click', () => dialog.close());
  confirmButton.addEventListener('click', async () => {
    dialog.close();
    cancelButton.disabled = true;
    cancelSent = true;
    try {
      const answer = await api('POST', `${base}/cancel`);
      const status = answer.data.status;
      showOutcome(cancelOutcome, status === 'cancelled' ? 'cancelled: the session ended before it started.' : `${status}: the agent stops within seconds (the live turn is cut short).`, false);
    } catch (error) {
      showOutcome(cancelOutcome, errorText(error), true);
      cancelButton.disabled = Boolean(current && FINISHED.has(current.status));
    }
    refreshRecord();
  });

  const stopClock = startClock(container);
  return () => {
    stopStream();
    stopClock();
    refreshRecord.stop();
    refreshSteers.stop();
    activity.stop();
    hooks.stop();
    conversation.stop();
    if (dialog.open) dialog.close();
  };
}
