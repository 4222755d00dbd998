// The session page's "Webhooks" card (README's Webhooks): each delivery of this session — the event,
// the receiver, its state (pending / delivered / failed), tries so far and the last answer.
// Read from GET /api/v2/sessions/<id>/webhooks; refreshed with the record, and every few
// seconds while a delivery is still pending (its retries happen after the session ended).

import { api } from './api.js';
import { errorText, h, setText } from './dom.js';

const PENDING_POLL_MS = 3000;

export function webhooksCard(base) {
  const body = h('tbody');
  const empty = h('p', { class: 'empty', text: 'No webhooks (no callbackUrl and no fleet-wide receiver, or nothing to tell yet).' });
  const problem = h('p', { class: 'hint', hidden: true });
  const table = h('table', { class: 'data webhooks', 'aria-labelledby': 'webhooks-title' },
    h('thead', {}, h('tr', {},
      h('th', { scope: 'col', text: 'Event' }),
      h('th', { scope: 'col', text: 'Receiver' }),
      h('th', { scope: 'col', text: 'State' }),
      h('th', { scope: 'col', class: 'col-num', text: 'Tries' }),
      h('th', { scope: 'col', text: 'Last answer' }))),
    body);
  const element = h('section', { class: 'card', 'aria-labelledby': 'webhooks-title' },
    h('h2', { id: 'webhooks-title', text: 'Webhooks' }), h('div', { class: 'table-wrap' }, table), empty, problem);
  let timer = null;
  const refresh = async () => {
    try {
      const deliveries = (await api('GET', `${base}/webhooks`)).data.deliveries;
      body.replaceChildren(...deliveries.map((d) => h('tr', { dataset: { delivery: d.id } },
        h('td', {}, h('code', { text: d.type })),
        h('td', { class: 'col-text', text: d.url }),
        h('td', { text: d.state }),
        h('td', { class: 'col-num', text: String(d.attempts) }),
        h('td', { text: d.lastStatus ? `HTTP ${d.lastStatus}` : (d.lastError || '—') }))));
      empty.hidden = deliveries.length > 0;
      table.hidden = deliveries.length === 0;
      problem.hidden = true;
      clearTimeout(timer);
      if (deliveries.some((d) => d.state === 'pending')) timer = setTimeout(refresh, PENDING_POLL_MS);
    } catch (error) {
      problem.hidden = false;
      setText(problem, `Could not read the webhooks — ${errorText(error)}`);
    }
  };
  // A delivery is queued when the session ends, asks, delivers or reports an issue: read
  // again when the record says one of those may have happened, not at every refresh.
  let seen = '';
  const update = (record) => {
    const key = JSON.stringify([record.status, record.signalOffset, record.delivery?.state]);
    if (key === seen) return;
    seen = key;
    refresh();
  };
  const stop = () => clearTimeout(timer);
  return { element, refresh, update, stop };
}
