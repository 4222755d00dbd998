// Small DOM helpers: element building, times, throttling. No framework: pages update the
// few nodes that change, so nothing is re-rendered wholesale while events stream in.

/**
 * h('a', {href: '/x', class: 'c', onclick: fn}, 'text', child, [more]) -> HTMLElement.
 * Props: `class`, `text`, `dataset` (object), `on<event>` (listener), `hidden`/`disabled`
 * (booleans), anything else as an attribute (null/false leave it out).
 */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
    else if (value === true) node.setAttribute(key, '');
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : String(child));
  }
}

/** Set a node's text only when it differs (no needless layout work, no lost selection). */
export function setText(node, value) {
  const text = value === null || value === undefined ? '' : String(value);
  if (node.textContent !== text) node.textContent = text;
}

let uniqueCounter = 0;
export function uniqueId(prefix) {
  uniqueCounter += 1;
  return `${prefix}-${uniqueCounter}`;
}

// --- times ------------------------------------------------------------------------------

const relative = new Intl.RelativeTimeFormat('en', { numeric: 'auto', style: 'short' });
const UNITS = [
  ['year', 365 * 86400],
  ['month', 30 * 86400],
  ['day', 86400],
  ['hour', 3600],
  ['minute', 60],
  ['second', 1],
];

/** "12 sec. ago", "3 min. ago", "yesterday"; '' for a missing time. */
export function relativeTime(iso, now = Date.now()) {
  if (!iso) return '';
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return String(iso);
  const seconds = Math.round((at - now) / 1000);
  if (Math.abs(seconds) < 5) return 'just now';
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size || unit === 'second') return relative.format(Math.round(seconds / size), unit);
  }
  return '';
}

const clockFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
const fullFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

export function clockTime(iso) {
  const at = Date.parse(iso);
  return Number.isNaN(at) ? '' : clockFormat.format(at);
}

export function fullTime(iso) {
  const at = Date.parse(iso);
  return Number.isNaN(at) ? '' : fullFormat.format(at);
}

/** A <time> showing a relative time, kept fresh by startClock(); the exact time as its title. */
export function timeElement(iso) {
  const node = h('time', { class: 'rel' });
  updateTime(node, iso);
  return node;
}

export function updateTime(node, iso) {
  if (node.dataset.iso === (iso || '')) return;
  node.dataset.iso = iso || '';
  if (iso) {
    node.setAttribute('datetime', iso);
    node.title = fullTime(iso);
  } else {
    node.removeAttribute('datetime');
    node.removeAttribute('title');
  }
  setText(node, iso ? relativeTime(iso) : '—');
}

/** Refresh every relative time under `root` each 15 s (a local clock, not a request). */
export function startClock(root) {
  const timer = setInterval(() => {
    const now = Date.now();
    for (const node of root.querySelectorAll('time.rel[datetime]')) setText(node, relativeTime(node.dataset.iso, now));
  }, 15000);
  return () => clearInterval(timer);
}

// --- pacing -----------------------------------------------------------------------------

/**
 * Call `fn` at most once per `ms`: the first call runs at once, calls during the wait are
 * folded into one trailing run, and a run never overlaps the previous one (fn may be async).
 */
export function throttle(fn, ms) {
  let last = 0;
  let timer = null;
  let running = null;
  let again = false;
  let stopped = false;
  const run = async () => {
    timer = null;
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    last = Date.now();
    running = Promise.resolve().then(fn).catch((error) => console.error(error));
    await running;
    running = null;
    if (again) {
      again = false;
      schedule();
    }
  };
  const schedule = () => {
    if (timer || stopped) return;
    timer = setTimeout(run, Math.max(0, last + ms - Date.now()));
  };
  schedule.stop = () => {
    stopped = true;
    clearTimeout(timer);
  };
  return schedule;
}

/** Resolve after `ms`, or at once when `signal` aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

/** Random hex, from crypto.getRandomValues (randomUUID needs a secure context). */
export function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

// --- shared bits of pages -----------------------------------------------------------------

export const STATUSES = ['queued', 'running', 'waiting', 'completed', 'failed', 'cancelled'];
export const FINISHED = new Set(['completed', 'failed', 'cancelled']);
export const SEVERITIES = ['info', 'warn', 'error', 'fatal'];

export function statusBadge(status) {
  return h('span', { class: `badge status-${status || 'unknown'}`, text: status || 'unknown' });
}

export function severityBadge(severity) {
  return h('span', { class: `badge severity-${severity || 'unknown'}`, text: severity || 'unknown' });
}

/** The live-updates indicator: its text says the state of the page's stream. */
export function liveIndicator() {
  const node = h('span', { class: 'live', dataset: { state: 'connecting' } }, h('span', { class: 'dot', 'aria-hidden': 'true' }), h('span', { class: 'live-text', text: 'connecting' }));
  const texts = { connecting: 'connecting', live: 'live', reconnecting: 'reconnecting', polling: 'updates every 3 s', ended: 'ended', offline: 'offline' };
  node.set = (state) => {
    node.dataset.state = state;
    setText(node.querySelector('.live-text'), texts[state] || state);
  };
  return node;
}

/** "accepted: offset 3", or "code: sentence" for an ApiError, into a role=status node. */
export function showOutcome(node, text, failed) {
  node.classList.toggle('error', Boolean(failed));
  node.classList.toggle('ok', !failed);
  setText(node, text);
}

export function errorText(error) {
  return `${error.code || 'error'}: ${error.message || String(error)}`;
}

/** The console's not-found page (an unknown path, a session that does not exist). */
export function notFoundPage(container, text) {
  document.title = 'Not found · WorkTrain';
  container.replaceChildren(h('section', { class: 'page not-found' },
    h('h1', { tabindex: '-1', text: 'Not found' }),
    h('p', { text }),
    h('p', {}, h('a', { href: '/' }, 'Back to the sessions'))));
}
