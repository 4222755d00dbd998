// Sessions page (`/`): the table "Sessions", live; a status filter with counts; pages of 100.
//
// Live: the global event stream (SSE) says *that* something changed; the page then reads the
// current page of records again (at most once a second, counts at most every 2 s), so the
// table always shows the server's truth in the server's order. Rows are kept by session id
// and only changed cells are touched.

import { api, follow, poll, workflows } from './api.js';
import { STATUSES, errorText, h, liveIndicator, setText, startClock, statusBadge, throttle, timeElement, updateTime } from './dom.js';
import { foldSessionEvent } from './mirror.js';

export const PAGE_SIZE = 100;
// Events after which a session may have changed status (the counts).
const STATUS_KINDS = new Set(['session_queued', 'session_started', 'session_resumed', 'turn_started', 'turn_ended', 'session_completed']);

function apiSource() {
  return {
    async list(status, offset, limit) {
      const query = new URLSearchParams({ limit: String(limit), offset: String(offset) });
      if (status) query.set('status', status);
      return (await api('GET', `/sessions?${query}`)).data;
    },
    async counts() {
      const replies = await Promise.all(STATUSES.map((s) => api('GET', `/sessions?status=${s}&limit=1`)));
      return Object.fromEntries(STATUSES.map((s, i) => [s, replies[i].data.totalCount]));
    },
    watch({ onEvent, onOpen, onState }) {
      return follow('/events', { onEvent, onOpen, onState });
    },
  };
}

function mirrorSource() {
  const records = new Map();
  const sorted = (status) => [...records.values()]
    .filter((r) => !status || r.status === status)
    .sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)) || b.sessionId.localeCompare(a.sessionId));
  return {
    async list(status, offset, limit) {
      const all = sorted(status);
      return { sessions: all.slice(offset, offset + limit), totalCount: all.length };
    },
    async counts() {
      const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]));
      for (const r of records.values()) counts[r.status] = (counts[r.status] || 0) + 1;
      return counts;
    },
    watch({ onEvent, onOpen, onState }) {
      return poll('/events', {
        items: 'events',
        onBatch: (events) => {
          for (const event of events) foldSessionEvent(records, event);
          onEvent(events[events.length - 1]);
        },
        onCaughtUp: onOpen,
        onState,
      });
    },
  };
}

export function stepText(record, catalogSteps = 0) {
  const count = record.stepCount || catalogSteps;
  if (!count) return '—';
  return `${Math.min(record.stepIndex + 1, count)}/${count}`;
}

const COLUMNS = [
  ['Session', 'col-id'],
  ['Workflow', 'col-workflow'],
  ['Goal', 'col-goal'],
  ['Status', 'col-status'],
  ['Turn', 'col-num col-turn'],
  ['Step', 'col-num col-step'],
  ['Pending', 'col-num col-pending'],
  ['Created', 'col-time'],
  ['Outcome', 'col-outcome'],
];

/** The last 12 characters of an id (random: unique on any screen of sessions), as `worktrain
 * top` shows it and every id argument takes it back (README's worktrain command). */
export function shortId(sessionId) {
  return sessionId.length > 13 ? `…${sessionId.slice(-12)}` : sessionId;
}

function newRow(sessionId) {
  // a phone shows the id's tail (CSS), its workflow and goal on a line under it (narrow-meta)
  const link = h('a', { class: 'mono session-link', href: `/sessions/${encodeURIComponent(sessionId)}`, 'aria-label': sessionId, title: sessionId },
    h('span', { class: 'id-full', text: sessionId }), h('span', { class: 'id-short', text: shortId(sessionId) }));
  const row = h('tr', { dataset: { id: sessionId } },
    h('td', { class: 'col-id' }, link, h('div', { class: 'narrow-meta' })),
    h('td', { class: 'col-workflow' }),
    h('td', { class: 'col-goal' }, h('div', { class: 'clamp2' })),
    h('td', { class: 'col-status' }),
    h('td', { class: 'col-num col-turn' }),
    h('td', { class: 'col-num col-step' }),
    h('td', { class: 'col-num col-pending' }),
    h('td', { class: 'col-time' }, timeElement(null)),
    h('td', { class: 'col-outcome' }));
  return row;
}

function fillRow(row, record, stepsOf) {
  const cells = row.cells;
  setText(cells[1], record.workflowId);
  const goal = record.goalPreview ?? record.goal ?? '';
  setText(cells[2].firstChild, goal);
  cells[2].title = goal;
  if (cells[3].dataset.status !== record.status) {
    cells[3].dataset.status = record.status;
    cells[3].replaceChildren(statusBadge(record.status));
  }
  setText(cells[4], record.turnId ? String(record.turnId) : '—');
  cells[4].title = `${record.turnCount || 0} turn(s) so far`;
  setText(cells[5], stepText(record, stepsOf(record.workflowId)));
  setText(cells[6], String(record.pendingSteers || 0));
  updateTime(cells[7].firstChild, record.createdAt);
  setText(cells[8], record.outcome || '');
  cells[8].title = record.outcomeDetail || '';
  setText(cells[0].querySelector('.narrow-meta'), [record.workflowId, goal].filter(Boolean).join(' · '));
  parentLink(cells[0], record.parentSessionId);
  row.dataset.search = `${record.sessionId} ${record.workflowId} ${goal}`.toLowerCase();
}

/** A child session (sub-agents, README's Sub-agents and questions) names its parent under its own id. */
function parentLink(cell, parentId) {
  const existing = cell.querySelector('.parent-link');
  if (!parentId) {
    existing?.remove();
    return;
  }
  if (existing?.dataset.parent === parentId) return;
  existing?.remove();
  cell.append(h('a', { class: 'parent-link', dataset: { parent: parentId }, href: `/sessions/${encodeURIComponent(parentId)}`, text: `child of ${parentId}` }));
}

/** Show only the rows whose id, workflow or goal contain every word of `query`. */
export function applySearch(tbody, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  for (const row of tbody.rows) {
    row.hidden = !words.every((word) => (row.dataset.search || '').includes(word));
    if (!row.hidden) shown += 1;
  }
  return shown;
}

export function sessionsPage(container, { query, config }) {
  const state = { status: STATUSES.includes(query.get('status')) ? query.get('status') : '', page: Math.max(1, Number.parseInt(query.get('page'), 10) || 1) };
  const source = config.readOnly ? mirrorSource() : apiSource();
  const live = liveIndicator();
  const select = h('select', { id: 'status-filter' },
    h('option', { value: '', text: 'All' }),
    STATUSES.map((s) => h('option', { value: s, text: s })));
  select.value = state.status;
  const counts = h('ul', { class: 'counts', 'aria-label': 'Counts' });
  const search = h('input', { id: 'session-search', type: 'search', placeholder: 'id, goal or workflow', autocomplete: 'off', spellcheck: 'false', value: query.get('q') || '' });
  const searchNote = h('span', { class: 'hint', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const table = h('table', { class: 'data sessions', 'aria-labelledby': 'sessions-title' },
    h('thead', {}, h('tr', {}, COLUMNS.map(([name, cls]) => h('th', { scope: 'col', class: cls, text: name })))),
    tbody);
  const empty = h('p', { class: 'empty', hidden: true });
  const problem = h('p', { class: 'problem', role: 'alert', hidden: true });
  const prev = h('button', { type: 'button', text: 'Previous page' });
  const next = h('button', { type: 'button', text: 'Next page' });
  const range = h('span', { class: 'range', 'aria-live': 'polite' });
  container.append(h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', { id: 'sessions-title', tabindex: '-1', text: 'Sessions' }), live),
    h('div', { class: 'toolbar' }, h('label', { class: 'inline', for: 'status-filter', text: 'Status' }), select, counts),
    h('div', { class: 'toolbar' }, h('label', { class: 'inline', for: 'session-search', text: 'Search' }), search, searchNote),
    problem,
    h('div', { class: 'table-wrap' }, table),
    empty,
    h('nav', { class: 'pager', 'aria-label': 'Session pages' }, prev, range, next)));

  let catalogSteps = new Map();
  workflows().then((data) => {
    catalogSteps = new Map(data.workflows.map((w) => [w.id, w.stepCount]));
  }).catch(() => {});
  const stepsOf = (id) => catalogSteps.get(id) || 0;

  const setUrl = () => {
    const params = new URLSearchParams();
    if (state.status) params.set('status', state.status);
    if (state.page > 1) params.set('page', String(state.page));
    const search = params.toString();
    history.replaceState(null, '', search ? `/?${search}` : '/');
  };

  let loads = 0; // only the newest answer is drawn: a slow older one never overwrites it
  const load = async () => {
    const mine = ++loads;
    let data;
    try {
      data = await source.list(state.status, (state.page - 1) * PAGE_SIZE, PAGE_SIZE);
      if (mine !== loads) return;
      problem.hidden = true;
    } catch (error) {
      if (mine !== loads) return;
      problem.hidden = false;
      setText(problem, `Could not read the sessions — ${errorText(error)}`);
      return;
    }
    const rows = new Map([...tbody.rows].map((row) => [row.dataset.id, row]));
    let cursor = tbody.firstElementChild;
    for (const record of data.sessions) {
      const row = rows.get(record.sessionId) || newRow(record.sessionId);
      rows.delete(record.sessionId);
      fillRow(row, record, stepsOf);
      if (row !== cursor) tbody.insertBefore(row, cursor);
      else cursor = cursor.nextElementSibling;
    }
    for (const row of rows.values()) row.remove();
    searched();
    const total = data.totalCount;
    const first = total ? (state.page - 1) * PAGE_SIZE + 1 : 0;
    const last = Math.min(total, state.page * PAGE_SIZE);
    setText(range, total ? `${first}–${last} of ${total}` : '0 of 0');
    prev.disabled = state.page <= 1;
    next.disabled = last >= total;
    empty.hidden = total > 0;
    if (!total) {
      empty.replaceChildren(state.status ? `No ${state.status} sessions.` : 'No sessions yet. ',
        !state.status && !config.readOnly ? h('a', { href: '/dispatch', text: 'Dispatch one.' }) : '');
    }
    if (state.page > 1 && first > total) {
      state.page = Math.max(1, Math.ceil(total / PAGE_SIZE));
      setUrl();
      refresh();
    }
  };

  let countLoads = 0;
  const loadCounts = async () => {
    const mine = ++countLoads;
    let data;
    try {
      data = await source.counts();
    } catch {
      return; // the table's own error says enough
    }
    if (mine !== countLoads) return;
    const total = Object.values(data).reduce((a, b) => a + b, 0);
    const items = [['', 'All', total], ...STATUSES.map((s) => [s, s, data[s] || 0])];
    counts.replaceChildren(...items.map(([value, label, n]) => h('li', {},
      h('button', {
        type: 'button',
        class: `count status-${value || 'all'}`,
        'aria-pressed': String(state.status === value),
        onclick: () => setFilter(value),
      }, label, ' ', h('b', { text: String(n) })))));
    for (const option of select.options) {
      const n = option.value ? data[option.value] || 0 : total;
      setText(option, `${option.value || 'All'} (${n})`);
    }
  };

  const searched = () => {
    const shown = applySearch(tbody, search.value);
    setText(searchNote, search.value.trim() ? `${shown} of ${tbody.rows.length} on this page` : '');
  };
  search.addEventListener('input', searched);

  const refresh = throttle(load, 1000);
  const refreshCounts = throttle(loadCounts, 2000);
  const setFilter = (value) => {
    state.status = value;
    state.page = 1;
    select.value = value;
    setUrl();
    for (const button of counts.querySelectorAll('button')) button.setAttribute('aria-pressed', String(button.classList.contains(`status-${value || 'all'}`)));
    load();
  };
  select.addEventListener('change', () => setFilter(select.value));
  prev.addEventListener('click', () => {
    state.page = Math.max(1, state.page - 1);
    setUrl();
    load();
  });
  next.addEventListener('click', () => {
    state.page += 1;
    setUrl();
    load();
  });

  refresh();
  refreshCounts();
  const stopWatch = source.watch({
    onEvent: (event) => {
      refresh();
      if (config.readOnly || STATUS_KINDS.has(event.kind)) refreshCounts();
    },
    onOpen: () => {
      refresh();
      refreshCounts();
    },
    onState: (state) => {
      live.set(state);
      // No stream (a restart, a cap on streams): read again at each retry, >= 2 s apart.
      if (state === 'reconnecting') {
        refresh();
        refreshCounts();
      }
    },
  });
  const stopClock = startClock(container);
  return () => {
    stopWatch();
    stopClock();
    refresh.stop();
    refreshCounts.stop();
  };
}
