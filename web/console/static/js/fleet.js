// Fleet page (`/fleet`, docs/operations.md): the workers, the queue, sessions by status, model calls in
// flight against the cap, steers a minute and the delivery latency — the same numbers as
// `GET /metrics` (both read what every process publishes in Redis: `GET /api/v2/fleet`,
// `GET /api/v2/workers`) — and their charts over the fleet's history (fleetcharts.js). Read
// again every REFRESH_MS; only changed nodes are touched. The workers table is compact: a
// worker's sandbox is a badge whose layers open on demand.

import { api } from './api.js';
import { FleetCharts } from './fleetcharts.js';
import { STATUSES, errorText, h, liveIndicator, setText, startClock, statusBadge, throttle, timeElement, updateTime } from './dom.js';

export const REFRESH_MS = 2000;
const WORKER_COLUMNS = [
  ['Host', 'col-host'],
  ['PID', 'col-pid'],
  ['Sessions', 'col-sessions'],
  ['Model calls', 'col-calls'],
  ['Sandbox', 'col-sandbox'],
  ['Started', 'col-started'],
  ['Heartbeat', 'col-heartbeat'],
];

/** The sandbox layers of a worker as a badge ("all 7 layers", "2 of 7 missing") whose
 * details (each layer and its state) open on demand. A layer is missing as
 * daemon/sandbox/report.py `missing` says: its state starts with `missing`, or host networking. */
export function sandboxBadge(layers) {
  const entries = Object.entries(layers || {});
  if (!entries.length) return h('span', { class: 'muted', text: '—' });
  const missing = entries.filter(([name, state]) => state.startsWith('missing') || (name === 'network' && state.startsWith('host')));
  const label = missing.length ? `${missing.length} of ${entries.length} missing` : `all ${entries.length} layers`;
  return h('details', { class: 'sandbox-details' },
    h('summary', { class: `badge ${missing.length ? 'severity-warn' : 'status-completed'}`, text: label, title: 'Sandbox layers: show each' }),
    h('ul', { class: 'sandbox-layers' }, entries.map(([name, state]) => h('li', { class: missing.some(([m]) => m === name) ? 'missing' : '' },
      h('b', { text: name }), ` ${state}`))));
}

function seconds(value) {
  if (value === null || value === undefined) return '—';
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(1)} s`;
}

function stat(label, id) {
  const value = h('span', { class: 'stat-value', id, text: '—' });
  const note = h('span', { class: 'stat-note' });
  const node = h('div', { class: 'stat', role: 'group', 'aria-label': label }, h('span', { class: 'stat-label', text: label }), value, note);
  return { node, value, note };
}

export function fleetPage(container) {
  const live = liveIndicator();
  const problem = h('p', { class: 'problem', role: 'alert', hidden: true });
  const stats = {
    workers: stat('Workers', 'fleet-workers'),
    queue: stat('Queue depth', 'fleet-queue'),
    calls: stat('Model calls in flight', 'fleet-calls'),
    steers: stat('Steers / min', 'fleet-steers'),
    p50: stat('Delivery p50', 'fleet-p50'),
    p99: stat('Delivery p99', 'fleet-p99'),
  };
  const meter = h('meter', { id: 'fleet-calls-meter', min: '0', max: '1', value: '0', 'aria-label': 'Model calls in flight against the cap' });
  stats.calls.node.append(meter);
  const statuses = h('ul', { class: 'counts', 'aria-label': 'Sessions by status' });
  const workersBody = h('tbody');
  const workersTable = h('table', { class: 'data workers', 'aria-labelledby': 'workers-title' },
    h('thead', {}, h('tr', {}, WORKER_COLUMNS.map(([name, cls]) => h('th', { scope: 'col', class: cls, text: name })))),
    workersBody);
  const noWorkers = h('p', { class: 'empty', text: 'No live workers: sessions stay queued until one starts (worktrain worker).', hidden: true });
  const totals = h('p', { class: 'hint fleet-totals' });
  const charts = new FleetCharts();
  container.append(h('section', { class: 'page fleet-page' },
    h('div', { class: 'page-head' }, h('h1', { tabindex: '-1', text: 'Fleet' }), live),
    problem,
    h('div', { class: 'stats' }, Object.values(stats).map((s) => s.node)),
    charts.element,
    h('section', { class: 'card', 'aria-labelledby': 'fleet-sessions-title' },
      h('h2', { id: 'fleet-sessions-title', text: 'Sessions by status' }), statuses, totals),
    h('section', { class: 'card', 'aria-labelledby': 'workers-title' },
      h('h2', { id: 'workers-title', text: 'Workers' }),
      h('div', { class: 'table-wrap' }, workersTable), noWorkers)));

  const drawFleet = (f) => {
    setText(stats.workers.value, String(f.workers));
    setText(stats.queue.value, String(f.queueDepth));
    const cap = f.modelCalls.cap;
    setText(stats.calls.value, cap ? `${f.modelCalls.inFlight} / ${cap}` : String(f.modelCalls.inFlight));
    setText(stats.calls.note, cap ? 'against WORKTRAIN_MAX_MODEL_CALLS' : 'no cap set');
    meter.max = String(cap || Math.max(1, f.modelCalls.inFlight));
    meter.value = String(f.modelCalls.inFlight);
    meter.hidden = !cap;
    setText(stats.steers.value, String(f.steersPerMinute));
    setText(stats.steers.note, 'accepted, last 60 s');
    setText(stats.p50.value, seconds(f.delivery.p50));
    setText(stats.p99.value, seconds(f.delivery.p99));
    setText(stats.p50.note, `${f.delivery.count} delivered`);
    setText(stats.p99.note, 'accepted → the model request');
    statuses.replaceChildren(...STATUSES.map((s) => h('li', { class: 'fleet-status', dataset: { status: s } },
      h('a', { href: `/?status=${s}`, class: `count status-${s}` }, statusBadge(s), ' ', h('b', { text: String(f.sessions[s] || 0) })))));
    const t = f.totals;
    const n = (count, word) => `${Number(count).toLocaleString('en')} ${word}${count === 1 ? '' : 's'}`;
    setText(totals, `Since the fleet started: ${n(t.steersAccepted, 'steer')} accepted · ${n(t.modelCalls, 'model call')} (${t.modelCallErrors} failed, ${t.modelCallsInterrupted} interrupted, ${t.modelRetries} retried) · ${n(t.tokens, 'token')} · ${n(t.fenced, 'attempt')} fenced`);
  };

  const drawWorkers = (workers) => {
    const rows = new Map([...workersBody.rows].map((row) => [row.dataset.id, row]));
    for (const w of workers) {
      let row = rows.get(w.id);
      rows.delete(w.id);
      if (!row) {
        row = h('tr', { dataset: { id: w.id } }, WORKER_COLUMNS.map(([, cls], i) => h('td', { class: cls }, i >= 5 ? timeElement(null) : null)));
        workersBody.append(row);
      }
      const c = row.cells;
      setText(c[0], w.host);
      setText(c[1], String(w.pid));
      setText(c[2], `${w.sessions.length} / ${w.concurrency}`);
      c[2].title = w.sessions.join('\n');
      setText(c[3], String(w.modelCallsInFlight));
      const layers = JSON.stringify(w.sandbox || {});
      if (c[4].dataset.layers !== layers) {
        c[4].dataset.layers = layers;
        c[4].replaceChildren(sandboxBadge(w.sandbox));
      }
      updateTime(c[5].firstChild, w.startedAt);
      updateTime(c[6].firstChild, w.heartbeatAt);
    }
    for (const row of rows.values()) row.remove();
    noWorkers.hidden = workers.length > 0;
  };

  const load = async () => {
    try {
      const [fleet, workers] = await Promise.all([api('GET', '/fleet'), api('GET', '/workers')]);
      drawFleet(fleet.data);
      charts.push(fleet.data);
      drawWorkers(workers.data.workers);
      problem.hidden = true;
      live.set('polling');
      setText(live.querySelector('.live-text'), `updates every ${REFRESH_MS / 1000} s`);
    } catch (error) {
      problem.hidden = false;
      setText(problem, `Could not read the fleet — ${errorText(error)}`);
      live.set('reconnecting');
    }
  };
  const refresh = throttle(load, REFRESH_MS);
  charts.start();
  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  const stopClock = startClock(container);
  return () => {
    clearInterval(timer);
    refresh.stop();
    charts.stop();
    stopClock();
  };
}
