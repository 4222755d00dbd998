// The Fleet page's charts (docs/operations.md): steers a minute, model calls in flight against the cap,
// delivery latency p50/p99 and sessions by status, over the last hour, 6 hours or day.
//
// The history is the server's (SPEC 3.6 v5): the fleet keeps one sample a minute for 24 h in
// Redis (`GET /api/v2/fleet/history`), so a page opened now shows the hours before it; the
// readings this page makes every REFRESH_MS (`GET /api/v2/fleet`) are added after the newest
// sample, and the history is read again each minute for the samples taken since.
//
// Drawn with uPlot (web/console/static/vendor/uplot: its minified file and MIT license,
// served by this server like every other file: no CDN, the CSP stays `'self'`). Each status
// is drawn in its colour, the one its badge has everywhere in the console (console.css
// `--st-<status>`); the time axis reads as clock times.

import { api } from './api.js';
import { STATUSES, h, setText } from './dom.js';

export const WINDOWS = [['1 h', 3600], ['6 h', 6 * 3600], ['24 h', 24 * 3600]];
const DEFAULT_WINDOW = 6 * 3600;
const HISTORY_EVERY_MS = 60000;
const HEIGHT = 190;

/** One reading of `GET /api/v2/fleet`, in the shape of a server sample. */
export function sampleOf(fleet, now = Date.now() / 1000) {
  return {
    t: Math.round(now),
    steersPerMinute: fleet.steersPerMinute,
    inFlight: fleet.modelCalls.inFlight,
    cap: fleet.modelCalls.cap || 0,
    p50: fleet.delivery.p50,
    p99: fleet.delivery.p99,
    sessions: Object.fromEntries(STATUSES.map((s) => [s, fleet.sessions[s] || 0])),
  };
}

// [label, pick, colour variable, dashed]
const CHARTS = [
  { id: 'chart-steers', title: 'Steers / min', unit: '', series: [['accepted, last 60 s', (s) => s.steersPerMinute, '--accent']] },
  { id: 'chart-calls', title: 'Model calls in flight vs the cap', unit: '', series: [['in flight', (s) => s.inFlight, '--st-running'], ['cap', (s) => s.cap || null, '--muted', true]] },
  { id: 'chart-latency', title: 'Delivery latency (s)', unit: 's', series: [['p50', (s) => s.p50, '--accent'], ['p99', (s) => s.p99, '--text', true]] },
  { id: 'chart-sessions', title: 'Sessions by status', unit: '', series: STATUSES.map((st) => [st, (s) => s.sessions?.[st] ?? null, `--st-${st}`]) },
];

function cssVar(name, fallback = '#59636e') {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
const clockSeconds = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
const dayAndClock = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
const full = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

/** The time axis' labels: clock times, one line each ("14:05"; with seconds over a few minutes;
 * with the day where a label is on another day than the one before). */
export function timeLabels(splits, range) {
  let day = null;
  return splits.map((t) => {
    const at = new Date(t * 1000);
    const label = range < 300 ? clockSeconds.format(at) : clock.format(at);
    const today = at.toDateString();
    const shown = day !== null && today !== day ? dayAndClock.format(at) : label;
    day = today;
    return shown;
  });
}

function options(chart, width) {
  const muted = cssVar('--muted');
  const grid = cssVar('--border', '#d5dae0');
  const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
  return {
    width,
    height: HEIGHT,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.15)] } },
    axes: [
      { ...axis, space: 64, values: (u, splits) => timeLabels(splits, u.scales.x.max - u.scales.x.min) },
      { ...axis, size: 48 },
    ],
    legend: { live: true },
    series: [
      { value: (u, v) => (v === null || v === undefined ? '—' : full.format(new Date(v * 1000))) },
      ...chart.series.map(([label, , colour, dashed]) => ({
        label,
        stroke: cssVar(colour),
        width: 2,
        dash: dashed ? [6, 4] : undefined,
        spanGaps: true,
        value: (u, v) => (v === null || v === undefined ? '—' : chart.unit === 's' ? `${v.toFixed(3)} s` : String(v)),
      })),
    ],
  };
}

export class FleetCharts {
  constructor() {
    this.history = []; // the server's samples, one a minute
    this.live = []; // this page's readings since the newest sample
    this.window = DEFAULT_WINDOW;
    this.plots = [];
    this.note = h('p', { class: 'hint charts-note' });
    this.buttons = WINDOWS.map(([label, seconds]) => h('button', {
      type: 'button', class: 'small', text: label, 'aria-pressed': String(seconds === this.window),
      onclick: () => this.setWindow(seconds),
    }));
    this.grid = h('div', { class: 'charts' });
    this.element = h('section', { class: 'charts-section', 'aria-label': 'Fleet charts' },
      h('div', { class: 'charts-head' },
        h('div', { class: 'window-buttons', role: 'group', 'aria-label': 'Chart window' }, this.buttons),
        this.note),
      this.grid);
    this.cards = CHARTS.map((chart) => {
      const area = h('div', { class: 'chart', id: chart.id, role: 'img', 'aria-label': chart.title });
      this.grid.append(h('section', { class: 'card chart-card' }, h('h2', { text: chart.title }), area));
      return { chart, area };
    });
    this.missing = typeof window.uPlot !== 'function';
    if (this.missing) this.grid.append(h('p', { class: 'problem', text: 'The charting library did not load (/console/vendor/uplot).' }));
    this.resize = new ResizeObserver(() => this.fit());
    this.stopped = false;
    this.timer = null;
  }

  /** Read the server's history now and every minute (the samples after the newest held). */
  start() {
    const read = async () => {
      const since = this.history.length ? this.history[this.history.length - 1].t : 0;
      try {
        const { samples } = (await api('GET', `/fleet/history?since=${since}`)).data;
        if (this.stopped) return;
        this.history.push(...samples);
        const newest = this.history.length ? this.history[this.history.length - 1].t : 0;
        this.live = this.live.filter((s) => s.t > newest);
        this.draw();
      } catch (error) {
        setText(this.note, `The fleet's history could not be read — ${error.code || 'error'}: ${error.message || error}`);
      }
    };
    read();
    this.timer = setInterval(read, HISTORY_EVERY_MS);
  }

  setWindow(seconds) {
    this.window = seconds;
    for (const [i, button] of this.buttons.entries()) button.setAttribute('aria-pressed', String(WINDOWS[i][1] === seconds));
    this.draw();
  }

  samples(now = Date.now() / 1000) {
    const since = now - this.window;
    return [...this.history, ...this.live].filter((s) => s.t >= since);
  }

  data(chart, samples) {
    return [samples.map((s) => s.t), ...chart.series.map(([, pick]) => samples.map((s) => pick(s) ?? null))];
  }

  push(fleet) {
    this.live.push(sampleOf(fleet));
    const since = Date.now() / 1000 - WINDOWS[WINDOWS.length - 1][1];
    while (this.live.length && this.live[0].t < since) this.live.shift();
    this.draw();
  }

  draw() {
    if (this.missing || !this.element.isConnected) return;
    const samples = this.samples();
    const first = samples.length ? samples[0].t : null;
    setText(this.note, first === null ? 'No samples yet: the workers take one a minute.'
      : `Since ${full.format(new Date(first * 1000))}: one sample a minute kept by the fleet, this page's readings after the last.`);
    const last = samples.length ? samples[samples.length - 1] : null;
    this.cards.forEach(({ chart, area }, i) => {
      // what is drawn, for people's tools and the tests: how many points, since when, the last value
      area.dataset.points = String(samples.length);
      area.dataset.first = first === null ? '' : String(first);
      area.dataset.last = last === null ? '' : String(chart.series[0][1](last) ?? '');
      if (!this.plots[i]) {
        this.plots[i] = new window.uPlot(options(chart, Math.max(200, area.clientWidth)), this.data(chart, samples), area);
        this.resize.observe(area);
      } else {
        this.plots[i].setData(this.data(chart, samples));
      }
    });
  }

  fit() {
    this.cards.forEach(({ area }, i) => {
      const plot = this.plots[i];
      if (plot && Math.abs(plot.width - area.clientWidth) > 2) plot.setSize({ width: Math.max(200, area.clientWidth), height: HEIGHT });
    });
  }

  stop() {
    this.stopped = true;
    clearInterval(this.timer);
    this.resize.disconnect();
    for (const plot of this.plots) plot?.destroy();
  }
}
