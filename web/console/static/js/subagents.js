// The Session page's sub-agents and questions (README's Sub-agents and questions, 4.9): the tree around the session
// (its parent, its children, each a link to its own page) and, while the agent waits for a
// reply (`waitingFor: "reply"`), a banner with its question and a reply box. A reply is a
// steer: the agent receives it as the result of its waiting signal_coordinator call.

import { api } from './api.js';
import { errorText, h, randomId, setText, showOutcome, statusBadge } from './dom.js';

const sessionLink = (id) => h('a', { class: 'mono', href: `/sessions/${encodeURIComponent(id)}`, text: id });

/** The "Sub-agents" card: the parent (if any) and the children, refreshed from the record. */
export function treeView() {
  const parent = h('p', { class: 'tree-parent', hidden: true });
  const list = h('ul', { class: 'tree-children', 'aria-label': 'Children' });
  const empty = h('p', { class: 'empty', text: 'No sub-agents.' });
  const element = h('section', { class: 'card', 'aria-labelledby': 'tree-title' },
    h('h2', { id: 'tree-title', text: 'Sub-agents' }), parent, list, empty);
  let drawn = '';
  const update = (record) => {
    const key = JSON.stringify([record.parentSessionId, record.rootSessionId, record.children]);
    if (key === drawn) return;
    drawn = key;
    parent.hidden = !record.parentSessionId;
    parent.replaceChildren(...(record.parentSessionId
      ? ['Spawned by ', sessionLink(record.parentSessionId), ` (depth ${record.depth})`,
        record.rootSessionId && record.rootSessionId !== record.parentSessionId ? h('span', {}, ' · root ', sessionLink(record.rootSessionId)) : '']
      : []));
    const children = record.children || [];
    list.replaceChildren(...children.map((child) => h('li', { dataset: { session: child.sessionId } },
      sessionLink(child.sessionId), ' ', h('code', { text: child.workflowId }), ' ', statusBadge(child.status),
      child.outcome ? h('span', { class: 'muted', text: ` ${child.outcome}` }) : '')));
    empty.hidden = children.length > 0 || Boolean(record.parentSessionId);
  };
  return { element, update };
}

/** The question banner with its reply box; hidden unless the session waits for a reply. */
export function questionBanner(base, onSent) {
  const summary = h('p', { class: 'question-text' });
  const text = h('textarea', { id: 'reply-text', rows: '2', placeholder: 'Your answer' });
  const send = h('button', { type: 'submit', class: 'primary', text: 'Send reply' });
  const outcome = h('p', { class: 'outcome', role: 'status', 'aria-label': 'Reply outcome' });
  const form = h('form', { class: 'reply-form', novalidate: true },
    h('label', { for: 'reply-text', text: 'Reply' }), text, h('div', { class: 'form-actions' }, send), outcome);
  const element = h('section', { class: 'card question-banner', role: 'region', 'aria-label': 'Question from the agent', hidden: true },
    h('h2', { text: 'The agent asks' }), summary, form);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!text.value.trim()) {
      showOutcome(outcome, 'invalid_request: a reply needs some text.', true);
      return;
    }
    send.disabled = true;
    try {
      const answer = await api('POST', `${base}/steer`, { body: { text: text.value, clientMsgId: `reply-${randomId()}` } });
      showOutcome(outcome, `replied: offset ${answer.steer.offset}`, false);
      text.value = '';
      onSent();
    } catch (error) {
      showOutcome(outcome, errorText(error), true);
    } finally {
      send.disabled = false;
    }
  });
  const update = (record) => {
    const question = record.waitingFor === 'reply' ? record.pendingQuestion : null;
    element.hidden = !question;
    if (question) setText(summary, question.summary + (question.data ? ` ${JSON.stringify(question.data)}` : ''));
  };
  return { element, update };
}
