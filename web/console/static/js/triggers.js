// Triggers page (`/triggers`, README's Triggers): each trigger of the triggers file with its state
// (last fire, last poll, cursor, last error, sessions started, its poller) and, for the one
// picked, its newest fires — each event with its key, what it did and the session it started
// or steered (`GET /api/v2/triggers`, `GET /api/v2/triggers/<id>`). Read again every REFRESH_MS.
// Secrets are never shown: only the names of the variables that hold them.

import { api } from './api.js';
import { errorText, h, liveIndicator, setText, startClock, throttle, timeElement } from './dom.js';

export const REFRESH_MS = 3000;
const COLUMNS = [
  ['Trigger', 'col-trigger'],
  ['Source', 'col-source'],
  ['Events', 'col-events'],
  ['Last fire', 'col-fire'],
  ['Last poll', 'col-poll'],
  ['Sessions', 'col-sessions'],
  ['Last error', 'col-error'],
];
const FIRE_COLUMNS = ['When', 'Event', 'Key', 'Result', 'Session', 'Why'];

function when(iso, what) {
  if (!iso) return document.createTextNode('never');
  return h('span', {}, what ? `${what} ` : '', timeElement(iso));
}

function sessionLink(id) {
  return id ? h('a', { href: `/sessions/${encodeURIComponent(id)}`, text: id }) : '—';
}

function triggerRow(t, picked) {
  const s = t.state || {};
  const poll = t.mode === 'poll' ? when(s.lastPollAt, s.lastPollResult) : document.createTextNode('webhook');
  const name = h('a', { href: `/triggers?id=${encodeURIComponent(t.id)}`, text: t.id });
  if (picked) name.setAttribute('aria-current', 'true');
  return h('tr', { dataset: { id: t.id } },
    h('th', { scope: 'row', class: 'col-trigger' }, name),
    h('td', { class: 'col-source', text: `${t.source} ${t.mode}` }),
    h('td', { class: 'col-events', text: t.events.join(', ') }),
    h('td', { class: 'col-fire' }, when(s.lastFireAt, s.lastResult)),
    h('td', { class: 'col-poll' }, poll),
    h('td', { class: 'col-sessions', text: String(s.sessionsStarted || 0) }),
    h('td', { class: 'col-error', text: s.lastError || '—' }));
}

function detailCard(t) {
  const s = t.state || {};
  const facts = [
    ['Workflow', t.workflowId],
    ['While a session runs', t.whileRunning],
    ['Report back', t.reportBack],
    ['Line in the file', String(t.line)],
  ];
  if (t.mode === 'poll') {
    facts.push(['Repository', t.repo || '—'], ['Every', `${t.interval} s`], ['Cursor', s.cursor || '—'],
      ['Poller', s.poller || 'none holds the lease'], ['Polls', String(s.polls || 0)]);
  }
  if (s.queued) facts.push(['Queued behind a live session', String(s.queued)]);
  if (t.secretEnv) facts.push(['Secret in', t.secretEnv]);
  if (t.tokenEnv) facts.push(['Token in', t.tokenEnv]);
  const rows = (t.fires || []).map((f) => h('tr', {},
    h('td', {}, timeElement(f.at)),
    h('td', { text: f.event }),
    h('td', { text: f.key || '—' }),
    h('td', { class: `fire-${f.result}`, text: f.offset ? `${f.result} (steer ${f.offset})` : f.result }),
    h('td', {}, sessionLink(f.sessionId)),
    h('td', { text: f.reason || f.error || '' })));
  return h('section', { class: 'card', 'aria-labelledby': 'trigger-detail-title' },
    h('h2', { id: 'trigger-detail-title', text: t.id }),
    h('dl', { class: 'record' }, facts.map(([k, v]) => h('div', { class: 'pair' }, h('dt', { text: k }), h('dd', { text: v, title: v })))),
    h('h3', { text: 'Fires' }),
    rows.length
      ? h('div', { class: 'table-wrap' }, h('table', { class: 'data fires', 'aria-label': `Fires of ${t.id}` },
        h('thead', {}, h('tr', {}, FIRE_COLUMNS.map((c) => h('th', { scope: 'col', text: c })))), h('tbody', {}, rows)))
      : h('p', { class: 'empty', text: 'No fire yet.' }));
}

export function triggersPage(container, { query }) {
  const live = liveIndicator();
  const problem = h('p', { class: 'problem', role: 'alert', hidden: true });
  const file = h('p', { class: 'hint' });
  const body = h('tbody');
  const table = h('table', { class: 'data triggers', 'aria-labelledby': 'triggers-title' },
    h('thead', {}, h('tr', {}, COLUMNS.map(([name, cls]) => h('th', { scope: 'col', class: cls, text: name })))), body);
  const none = h('p', { class: 'empty', hidden: true },
    'No triggers. Write them in ', h('code', { text: '<data dir>/triggers.yml' }), ' (or WORKTRAIN_TRIGGERS_FILE) and restart.');
  const detail = h('div');
  const picked = query.get('id');
  container.append(h('section', { class: 'page triggers-page' },
    h('div', { class: 'page-head' }, h('h1', { tabindex: '-1', id: 'triggers-title', text: 'Triggers' }), live),
    problem, file,
    h('section', { class: 'card' }, h('div', { class: 'table-wrap' }, table), none),
    detail));

  const load = async () => {
    try {
      const list = await api('GET', '/triggers');
      const triggers = list.data.triggers;
      setText(file, list.data.file ? `From ${list.data.file}` : '');
      body.replaceChildren(...triggers.map((t) => triggerRow(t, t.id === picked)));
      none.hidden = triggers.length > 0;
      if (picked) {
        const one = await api('GET', `/triggers/${encodeURIComponent(picked)}?limit=50`);
        detail.replaceChildren(detailCard(one.data));
      }
      problem.hidden = true;
      live.set('polling');
      setText(live.querySelector('.live-text'), `updates every ${REFRESH_MS / 1000} s`);
    } catch (error) {
      problem.hidden = false;
      setText(problem, `Could not read the triggers — ${errorText(error)}`);
      live.set('reconnecting');
    }
  };
  const refresh = throttle(load, REFRESH_MS);
  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  const stopClock = startClock(container);
  return () => {
    clearInterval(timer);
    refresh.stop();
    stopClock();
  };
}
