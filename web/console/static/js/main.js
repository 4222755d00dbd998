// The console's entry point: reads the server's mode from the page shell, routes the path to
// a page, keeps links inside the console without reloads, and runs the sign-in flow.

import { api, onUnauthorized, resetCatalog, token } from './api.js';
import { h, notFoundPage, showOutcome } from './dom.js';
import { dispatchPage } from './dispatch.js';
import { fleetPage } from './fleet.js';
import { issuesPage } from './issues.js';
import { sessionPage } from './session.js';
import { sessionsPage } from './sessions.js';
import { triggersPage } from './triggers.js';

const root = document.documentElement;
const config = {
  readOnly: root.dataset.mode === 'standalone',
  tokenRequired: root.dataset.auth === 'token',
};

// docs/security.md: `worktrain up` and `worktrain console` print a link whose token is in the
// fragment (`/#token=...`), which never reaches a server or a log. Move it into this tab's
// sessionStorage, as the sign-in does, and take it out of the address bar and the history.
// A link pasted into a tab that already shows the console (the sign-in page, say) changes
// only the fragment: no load, so the same happens on `hashchange`, and the page is drawn again
// signed in (issue 45).
function adoptFragmentToken() {
  const match = /^#token=([^&]+)$/.exec(location.hash);
  if (!match) return false;
  token.set(decodeURIComponent(match[1]));
  history.replaceState(history.state, '', location.pathname + location.search);
  return true;
}
adoptFragmentToken();

const ROUTES = [
  [/^\/$/, sessionsPage, 'Sessions'],
  [/^\/sessions\/([^/]+)$/, sessionPage, 'Session'],
  [/^\/dispatch$/, dispatchPage, 'Dispatch'],
  [/^\/issues$/, issuesPage, 'Issues'],
  [/^\/fleet$/, fleetPage, 'Fleet'],
  [/^\/triggers$/, triggersPage, 'Triggers'],
];

const main = document.getElementById('main');
let cleanup = null;

function teardown() {
  if (cleanup) cleanup();
  cleanup = null;
}

function markNav(path) {
  for (const link of document.querySelectorAll('.nav a')) {
    const href = link.getAttribute('href');
    const current = href === '/' ? path === '/' || path.startsWith('/sessions/') : path.startsWith(href);
    if (current) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

function render({ focus = false, message = '' } = {}) {
  teardown();
  main.replaceChildren();
  document.getElementById('sign-out').hidden = !(config.tokenRequired && token.get());
  if (config.tokenRequired && !token.get()) {
    markNav('');
    cleanup = signInPage(main, message);
    return;
  }
  const path = location.pathname;
  markNav(path);
  for (const [pattern, page, title] of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    document.title = `${title} · WorkTrain`;
    const params = match.slice(1).map(decodeURIComponent);
    cleanup = page(main, { params, query: new URLSearchParams(location.search), config, navigate });
    if (focus) main.querySelector('h1')?.focus();
    return;
  }
  notFoundPage(main, `There is no page at ${path} in this console.`);
}


/** Go to a console URL without a reload (history entry unless `replace`). */
export function navigate(url, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  render({ focus: true });
}

function isConsolePath(path) {
  return ROUTES.some(([pattern]) => pattern.test(path));
}

document.addEventListener('click', (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const link = event.target.closest('a[href]');
  if (!link || link.target || link.hasAttribute('download') || link.origin !== location.origin) return;
  if (!isConsolePath(link.pathname)) return;
  event.preventDefault();
  if (link.pathname + link.search !== location.pathname + location.search) navigate(link.pathname + link.search);
});
// (a fragment change fires popstate first, then hashchange: whichever sees the token takes it)
window.addEventListener('popstate', () => {
  if (adoptFragmentToken()) resetCatalog();
  render({ focus: true });
});
window.addEventListener('hashchange', () => {
  if (!adoptFragmentToken()) return;
  resetCatalog();
  render({ focus: true });
});

// --- sign-in (README's Console): a password field "API token", a button "Sign in" ------------------

function signInPage(container, message) {
  document.title = 'Sign in · WorkTrain';
  const input = h('input', { id: 'api-token', type: 'password', autocomplete: 'current-password', spellcheck: 'false', required: true });
  const outcome = h('p', { class: 'outcome', role: 'alert' });
  const button = h('button', { type: 'submit', class: 'primary', text: 'Sign in' });
  const form = h('form', { class: 'card signin', novalidate: true },
    h('h1', { tabindex: '-1', text: 'Sign in' }),
    h('p', { class: 'hint', text: 'This WorkTrain server wants its API token. It is kept in this tab only, and sent as a bearer header.' }),
    h('p', { class: 'hint signin-where' }, 'Started with ', h('code', { text: 'worktrain up' }), '? Run ', h('code', { text: 'worktrain console' }),
      ' in a terminal: it opens this console signed in. The token itself is in ', h('code', { text: '<data dir>/api-token' }),
      ' (by default ', h('code', { text: '~/.worktrain/api-token' }), '). A server you started yourself uses the ', h('code', { text: 'WORKTRAIN_API_TOKEN' }), ' you gave it.'),
    h('label', { for: 'api-token', text: 'API token' }),
    input,
    h('div', { class: 'form-actions' }, button),
    outcome);
  if (message) showOutcome(outcome, message, true);
  let abort = new AbortController();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) {
      showOutcome(outcome, 'Enter the API token.', true);
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      // Any /api/v2 route checks the token; the catalog is small and exists in every mode.
      await api('GET', '/workflows', { bearer: value, signal: abort.signal });
      token.set(value);
      resetCatalog();
      render({ focus: true });
    } catch (error) {
      if (error.name === 'AbortError') return;
      const text = error.status === 401 ? 'unauthorized: That token was refused.' : `${error.code}: ${error.message}`;
      showOutcome(outcome, text, true);
      input.select();
    } finally {
      button.disabled = false;
    }
  });
  container.append(h('section', { class: 'page page-narrow' }, form));
  input.focus();
  return () => {
    abort.abort();
    abort = null;
  };
}

onUnauthorized(() => {
  if (!config.tokenRequired && !token.get()) return; // nothing to sign in with: the page shows the error
  token.clear();
  render({ message: 'unauthorized: the server refused the token; sign in again.' });
});

document.getElementById('sign-out').addEventListener('click', () => {
  token.clear();
  render({ focus: true });
});

if (config.readOnly) document.getElementById('mode-badge').hidden = false;
render();
