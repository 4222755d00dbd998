// Issues page (`/issues`): what agents reported, newest first, with severity badges; filter by
// severity and by session. The issue stream is read forward from its start (the API pages
// forward only), keeping the newest MAX_KEPT; new ones arrive through the global event
// stream's `issue_reported` (standalone: the mirror, read every 3 s).

import { follow, poll, readPages } from './api.js';
import { SEVERITIES, errorText, h, liveIndicator, setText, severityBadge, startClock, throttle, timeElement } from './dom.js';

const MAX_KEPT = 5000;
const PAGE_SIZE = 100;

function extraText(issue) {
  const parts = [];
  if (issue.toolName) parts.push(`tool: ${issue.toolName}`);
  if (issue.command) parts.push(`command: ${issue.command}`);
  if (issue.suggestedFix) parts.push(`suggested fix: ${issue.suggestedFix}`);
  if (issue.context) parts.push(`context: ${typeof issue.context === 'string' ? issue.context : JSON.stringify(issue.context, null, 2)}`);
  return parts.join('\n');
}

function issueRow(issue) {
  const extra = extraText(issue);
  const session = issue.sessionId || '';
  return h('tr', { dataset: { id: issue.id } },
    h('td', { class: 'col-sev' }, severityBadge(issue.severity)),
    h('td', { class: 'col-summary' }, h('span', { text: issue.summary || '' }),
      // On a narrow window the columns after this one are hidden: the same facts, on a line.
      h('div', { class: 'narrow-meta' }, `${issue.kind || ''} · `, timeElement(issue.ts), session ? ' · ' : '',
        session ? h('a', { class: 'mono', href: `/sessions/${encodeURIComponent(session)}`, text: session }) : ''),
      extra ? h('details', { class: 'more' }, h('summary', { text: 'Details' }), h('pre', { class: 'wrap', text: extra })) : null),
    h('td', { class: 'col-kind', text: issue.kind || '' }),
    h('td', { class: 'col-id' }, session ? h('a', { class: 'mono', href: `/sessions/${encodeURIComponent(session)}`, text: session }) : ''),
    h('td', { class: 'col-num', text: issue.turnId ? String(issue.turnId) : '—' }),
    h('td', { class: 'col-time' }, timeElement(issue.ts)));
}

export function issuesPage(container, { query, config }) {
  const state = {
    severity: SEVERITIES.includes(query.get('severity')) ? query.get('severity') : '',
    session: (query.get('session') || '').trim(),
    page: 1,
  };
  const live = liveIndicator();
  const severity = h('select', { id: 'issues-severity' }, h('option', { value: '', text: 'All' }), SEVERITIES.map((s) => h('option', { value: s, text: s })));
  severity.value = state.severity;
  const session = h('input', { id: 'issues-session', type: 'search', spellcheck: 'false', autocomplete: 'off', placeholder: 'sess_… (any)', list: 'issues-sessions' });
  session.value = state.session;
  const knownSessions = h('datalist', { id: 'issues-sessions' });
  const tbody = h('tbody');
  const table = h('table', { class: 'data issues', 'aria-labelledby': 'issues-title' },
    h('thead', {}, h('tr', {}, [['Severity', 'col-sev'], ['Summary', 'col-summary'], ['Kind', 'col-kind'], ['Session', 'col-id'], ['Turn', 'col-num'], ['Reported', 'col-time']]
      .map(([name, cls]) => h('th', { scope: 'col', class: cls, text: name })))),
    tbody);
  const empty = h('p', { class: 'empty', hidden: true });
  const problem = h('p', { class: 'problem', role: 'alert', hidden: true });
  const counts = h('p', { class: 'counts-line' });
  const prev = h('button', { type: 'button', text: 'Previous page' });
  const next = h('button', { type: 'button', text: 'Next page' });
  const range = h('span', { class: 'range', 'aria-live': 'polite' });
  container.append(h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', { id: 'issues-title', tabindex: '-1', text: 'Issues' }), live),
    h('div', { class: 'toolbar' },
      h('label', { class: 'inline', for: 'issues-severity', text: 'Severity' }), severity,
      h('label', { class: 'inline', for: 'issues-session', text: 'Session' }), session, knownSessions,
      counts),
    problem,
    h('div', { class: 'table-wrap' }, table),
    empty,
    h('nav', { class: 'pager', 'aria-label': 'Issue pages' }, prev, range, next)));

  let issues = []; // oldest first, the newest MAX_KEPT
  const add = (list) => {
    issues = issues.concat(list);
    if (issues.length > MAX_KEPT) issues = issues.slice(issues.length - MAX_KEPT);
  };

  const draw = () => {
    const wanted = state.session.toLowerCase();
    const shown = [];
    const perSeverity = Object.fromEntries(SEVERITIES.map((s) => [s, 0]));
    for (let i = issues.length - 1; i >= 0; i -= 1) {
      const issue = issues[i];
      if (wanted && !String(issue.sessionId || '').toLowerCase().includes(wanted)) continue;
      perSeverity[issue.severity] = (perSeverity[issue.severity] || 0) + 1;
      if (state.severity && issue.severity !== state.severity) continue;
      shown.push(issue);
    }
    setText(counts, SEVERITIES.map((s) => `${s} ${perSeverity[s]}`).join(' · '));
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages);
    const first = (state.page - 1) * PAGE_SIZE;
    const slice = shown.slice(first, first + PAGE_SIZE);
    const rows = new Map([...tbody.rows].map((row) => [row.dataset.id, row]));
    let cursor = tbody.firstElementChild;
    for (const issue of slice) {
      const row = rows.get(issue.id) || issueRow(issue);
      rows.delete(issue.id);
      if (row !== cursor) tbody.insertBefore(row, cursor);
      else cursor = cursor.nextElementSibling;
    }
    for (const row of rows.values()) row.remove();
    setText(range, shown.length ? `${first + 1}–${first + slice.length} of ${shown.length}` : '0 of 0');
    prev.disabled = state.page <= 1;
    next.disabled = state.page >= pages;
    empty.hidden = shown.length > 0;
    setText(empty, issues.length ? 'No issues match the filter.' : 'No issues reported.');
    const ids = [...new Set(issues.map((i) => i.sessionId).filter(Boolean))].slice(-200);
    if (knownSessions.childElementCount !== ids.length) knownSessions.replaceChildren(...ids.map((id) => h('option', { value: id })));
  };

  const setUrl = () => {
    const params = new URLSearchParams();
    if (state.severity) params.set('severity', state.severity);
    if (state.session) params.set('session', state.session);
    const search = params.toString();
    history.replaceState(null, '', search ? `/issues?${search}` : '/issues');
  };
  severity.addEventListener('change', () => {
    state.severity = severity.value;
    state.page = 1;
    setUrl();
    draw();
  });
  session.addEventListener('input', () => {
    state.session = session.value.trim();
    state.page = 1;
    setUrl();
    draw();
  });
  prev.addEventListener('click', () => {
    state.page -= 1;
    draw();
  });
  next.addEventListener('click', () => {
    state.page += 1;
    draw();
  });

  const fail = (error) => {
    problem.hidden = false;
    setText(problem, `Could not read the issues — ${errorText(error)}`);
  };
  let stop;
  if (config.readOnly) {
    stop = poll('/issues', { items: 'issues', onBatch: (list) => { add(list); draw(); }, onCaughtUp: draw, onState: live.set });
  } else {
    let cursor = '';
    const controller = new AbortController();
    const readNew = throttle(async () => {
      try {
        cursor = await readPages('/issues', { items: 'issues', cursor, onBatch: add, signal: controller.signal });
        problem.hidden = true;
        draw();
      } catch (error) {
        if (error.name !== 'AbortError') fail(error);
      }
    }, 500);
    readNew();
    const stopFollow = follow('/events', {
      onEvent: (event) => {
        if (event.kind === 'issue_reported') readNew();
      },
      onOpen: readNew,
      onState: (state) => {
        live.set(state);
        if (state === 'reconnecting') readNew(); // no stream for now: read at each retry
      },
    });
    stop = () => {
      stopFollow();
      readNew.stop();
      controller.abort();
    };
  }
  draw();
  const stopClock = startClock(container);
  return () => {
    stop();
    stopClock();
  };
}
