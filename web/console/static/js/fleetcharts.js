// The Fleet page's charts (docs/operations.md): steers a minute, model calls in flight against the cap,
// delivery latency p50/p99 and sessions by status, over the last hour, one point per reading
// of `GET /api/v2/fleet` (every REFRESH_MS while the page is open).
//
// Drawn with uPlot (web/console/static/vendor/uplot: its minified file and MIT license,
// served by this server like every other file: no CDN, the CSP stays `'self'`). The readings
// are kept in this browser's localStorage, so the hour survives a reload; the server keeps
// no history of its own, so the charts cover the time this browser watched.

import { h } from './dom.js';

export const WINDOW_SECONDS = 3600;
const STORE = 'worktrain.fleet.samples.v1';
const STATUS_SERIES = ['queued', 'running', 'waiting', 'completed', 'failed', 'cancelled'];
const COLORS = ['#2456c9', '#d1242f', '#1a7f37', '#8a5a00', '#8250df', '#59636e'];

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE) || '[]');
    return Array.isArray(saved) ? saved : [];
  } catch {
    return [];
  }
}

export function sampleOf(fleet, now = Date.now() / 1000) {
  return {
    t: Math.round(now),
    steers: fleet.steersPerMinute,
    inFlight: fleet.modelCalls.inFlight,
    cap: fleet.modelCalls.cap || null,
    p50: fleet.delivery.p50,
    p99: fleet.delivery.p99,
    sessions: Object.fromEntries(STATUS_SERIES.map((s) => [s, fleet.sessions[s] || 0])),
  };
}

const CHARTS = [
  { id: 'chart-steers', title: 'Steers / min', unit: '', series: [['accepted, last 60 s', (s) => s.steers]] },
  { id: 'chart-calls', title: 'Model calls in flight vs the cap', unit: '', series: [['in flight', (s) => s.inFlight], ['cap', (s) => s.cap, true]] },
  { id: 'chart-latency', title: 'Delivery latency (s)', unit: 's', series: [['p50', (s) => s.p50], ['p99', (s) => s.p99]] },
  { id: 'chart-sessions', title: 'Sessions by status', unit: '', series: STATUS_SERIES.map((st) => [st, (s) => s.sessions[st]]) },
];

function cssVar(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function options(chart, width) {
  const muted = cssVar('--muted', '#59636e');
  const grid = cssVar('--border', '#d5dae0');
  const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
  return {
    width,
    height: 190,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.15)] } },
    axes: [axis, { ...axis, size: 48 }],
    legend: { live: true },
    series: [{}, ...chart.series.map(([label, , dashed], i) => ({
      label,
      stroke: COLORS[i % COLORS.length],
      width: 2,
      dash: dashed ? [6, 4] : undefined,
      spanGaps: true,
      value: (u, v) => (v === null || v === undefined ? '—' : chart.unit === 's' ? `${v.toFixed(3)} s` : String(v)),
    }))],
  };
}

export class FleetCharts {
  constructor() {
    this.samples = load();
    this.plots = [];
    this.element = h('div', { class: 'charts', 'aria-label': 'Fleet charts, last hour' });
    this.cards = CHARTS.map((chart) => {
      const area = h('div', { class: 'chart', id: chart.id, role: 'img', 'aria-label': `${chart.title}, last hour` });
      this.element.append(h('section', { class: 'card chart-card' }, h('h2', { text: chart.title }), area));
      return { chart, area };
    });
    this.missing = typeof window.uPlot !== 'function';
    if (this.missing) this.element.append(h('p', { class: 'problem', text: 'The charting library did not load (/console/vendor/uplot).' }));
    this.resize = new ResizeObserver(() => this.fit());
  }

  data(chart) {
    const s = this.samples;
    return [s.map((x) => x.t), ...chart.series.map(([, pick]) => s.map((x) => pick(x) ?? null))];
  }

  push(fleet) {
    const sample = sampleOf(fleet);
    this.samples.push(sample);
    const since = sample.t - WINDOW_SECONDS;
    while (this.samples.length && this.samples[0].t < since) this.samples.shift();
    try {
      localStorage.setItem(STORE, JSON.stringify(this.samples));
    } catch (error) {
      console.warn('fleet charts: the readings were not saved', error);
    }
    this.draw();
  }

  draw() {
    if (this.missing || !this.element.isConnected) return;
    this.cards.forEach(({ chart, area }, i) => {
      if (!this.plots[i]) {
        this.plots[i] = new window.uPlot(options(chart, Math.max(200, area.clientWidth)), this.data(chart), area);
        this.resize.observe(area);
      } else {
        this.plots[i].setData(this.data(chart));
      }
    });
  }

  fit() {
    this.cards.forEach(({ area }, i) => {
      const plot = this.plots[i];
      if (plot && Math.abs(plot.width - area.clientWidth) > 2) plot.setSize({ width: Math.max(200, area.clientWidth), height: 190 });
    });
  }

  stop() {
    this.resize.disconnect();
    for (const plot of this.plots) plot?.destroy();
  }
}
