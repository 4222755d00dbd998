// Dispatch page (`/dispatch`): a workflow from the catalog, a goal, a workspace; "Dispatch"
// starts the session and opens its page. Each submission carries its own Idempotency-Key,
// so a double click or a retried request starts one session, not two.

import { api, workflows } from './api.js';
import { errorText, h, randomId, setText, showOutcome } from './dom.js';

const WORKSPACE_KEY = 'worktrain.lastWorkspace'; // a convenience, not a secret: localStorage

export function dispatchPage(container, { config, navigate, query }) {
  // "Dispatch again" on a session's page opens this form filled in with that session's fields.
  const again = { workflow: query?.get('workflow') || '', goal: query?.get('goal') || '', workspace: query?.get('workspace') || '' };
  const readOnly = config.readOnly;
  const select = h('select', { id: 'dispatch-workflow', required: true, disabled: true }, h('option', { value: '', text: 'Loading the catalog…' }));
  const describe = h('p', { class: 'hint', id: 'dispatch-workflow-about' });
  select.setAttribute('aria-describedby', 'dispatch-workflow-about');
  const goal = h('textarea', { id: 'dispatch-goal', rows: '4', required: true, placeholder: 'What the agent should achieve' });
  const workspace = h('input', { id: 'dispatch-workspace', type: 'text', required: true, spellcheck: 'false', autocomplete: 'off', placeholder: '/absolute/path/on/the/worker/host' });
  workspace.value = again.workspace || localStorage.getItem(WORKSPACE_KEY) || '';
  goal.value = again.goal;
  // README's Coding sessions: where the agent works and what becomes of its work (delivery: worktree only)
  const strategy = h('select', { id: 'dispatch-branch-strategy' },
    h('option', { value: 'none', text: 'none — the workspace as it is' }),
    h('option', { value: 'read-only', text: 'read-only — the agent only looks' }),
    h('option', { value: 'worktree', text: 'worktree — a git worktree and branch of its own' }));
  const delivery = h('select', { id: 'dispatch-delivery', disabled: true },
    h('option', { value: 'commit', text: 'commit on its branch' }),
    h('option', { value: 'push', text: 'commit and push' }),
    h('option', { value: 'none', text: 'none' }));
  strategy.addEventListener('change', () => { delivery.disabled = readOnly || strategy.value !== 'worktree'; });
  // README's Webhooks: an optional receiver of this session's webhooks
  const callback = h('input', { id: 'dispatch-callback-url', type: 'url', spellcheck: 'false', autocomplete: 'off', placeholder: 'https://coordinator.example/hooks (optional)' });
  // docs/DEVELOPING.md: the session's model (each field optional: the workflow's, then the fleet's default)
  const model = h('input', { id: 'dispatch-model', type: 'text', spellcheck: 'false', autocomplete: 'off', placeholder: 'default (e.g. claude-haiku-4-5)' });
  const maxTokens = h('input', { id: 'dispatch-max-output-tokens', type: 'number', min: '1', placeholder: 'default' });
  const thinking = h('input', { id: 'dispatch-thinking-budget', type: 'number', min: '0', placeholder: '0: no extended thinking' });
  const agentFields = h('details', { class: 'agent-config' }, h('summary', { text: 'Model (optional)' }),
    h('label', { for: 'dispatch-model', text: 'Model' }), model,
    h('label', { for: 'dispatch-max-output-tokens', text: 'Max output tokens' }), maxTokens,
    h('label', { for: 'dispatch-thinking-budget', text: 'Thinking budget (tokens)' }), thinking);
  const agentConfig = () => {
    const config = {};
    if (model.value.trim()) config.model = model.value.trim();
    if (maxTokens.value !== '') config.maxOutputTokens = Number(maxTokens.value);
    if (thinking.value !== '') config.thinkingBudgetTokens = Number(thinking.value);
    return Object.keys(config).length ? { agentConfig: config } : {};
  };
  const button = h('button', { type: 'submit', class: 'primary', text: 'Dispatch', disabled: readOnly });
  const outcome = h('p', { class: 'outcome', role: 'status', 'aria-label': 'Dispatch outcome' });
  const problems = h('div', { class: 'catalog-problems' });
  const form = h('form', { class: 'card dispatch-form', novalidate: true },
    h('label', { for: 'dispatch-workflow', text: 'Workflow' }), select, describe,
    h('label', { for: 'dispatch-goal', text: 'Goal' }), goal,
    h('label', { for: 'dispatch-workspace', text: 'Workspace' }), workspace,
    h('p', { class: 'hint', text: 'An absolute path on the host of the worker that picks the session up.' }),
    h('label', { for: 'dispatch-branch-strategy', text: 'Branch strategy' }), strategy,
    h('label', { for: 'dispatch-delivery', text: 'Delivery' }), delivery,
    h('label', { for: 'dispatch-callback-url', text: 'Callback URL' }), callback,
    agentFields,
    h('div', { class: 'form-actions' }, button),
    outcome);
  if (readOnly) {
    goal.disabled = true;
    workspace.disabled = true;
    strategy.disabled = true;
    callback.disabled = true;
  }
  container.append(h('section', { class: 'page page-narrow' },
    h('div', { class: 'page-head' }, h('h1', { tabindex: '-1', text: 'Dispatch' })),
    readOnly ? h('p', { class: 'notice', text: 'Read-only console (standalone, no Redis): the catalog is shown, dispatching needs worktrain web with Redis.' }) : null,
    form,
    problems));

  let catalog = [];
  const about = () => {
    const flow = catalog.find((w) => w.id === select.value);
    setText(describe, flow ? `${flow.description || flow.name} · ${flow.stepCount} step${flow.stepCount === 1 ? '' : 's'}` : '');
  };
  select.addEventListener('change', about);
  workflows().then((data) => {
    catalog = [...data.workflows].sort((a, b) => (a.name || a.id).localeCompare(b.name || b.id));
    select.replaceChildren(...catalog.map((w) => h('option', { value: w.id, text: w.name && w.name !== w.id ? `${w.name} (${w.id})` : w.id })));
    select.disabled = readOnly || catalog.length === 0;
    if (again.workflow && catalog.some((w) => w.id === again.workflow)) select.value = again.workflow;
    if (!catalog.length) select.append(h('option', { value: '', text: 'No workflows in the catalog' }));
    about();
    const skipped = Object.entries(data.problems || {});
    if (skipped.length) {
      problems.replaceChildren(h('details', { class: 'card' },
        h('summary', { text: `${skipped.length} workflow file${skipped.length === 1 ? ' was' : 's were'} skipped` }),
        h('ul', {}, skipped.map(([file, why]) => h('li', {}, h('code', { text: file }), ` — ${why}`)))));
    }
  }).catch((error) => {
    select.replaceChildren(h('option', { value: '', text: 'The catalog could not be read' }));
    showOutcome(outcome, errorText(error), true);
  });

  let key = randomId(); // one key per intended dispatch: a repeat of it is the same session
  const changed = () => {
    key = randomId();
  };
  for (const field of [select, goal, workspace, strategy, delivery, callback, model, maxTokens, thinking]) field.addEventListener('input', changed);

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (readOnly) return;
    const missing = [[select, 'Workflow'], [goal, 'Goal'], [workspace, 'Workspace']].find(([field]) => !field.value.trim());
    if (missing) {
      showOutcome(outcome, `invalid_request: ${missing[1]} is required.`, true);
      missing[0].focus();
      return;
    }
    button.disabled = true;
    showOutcome(outcome, 'dispatching…', false);
    try {
      const answer = await api('POST', '/auto/dispatch', {
        body: {
          workflowId: select.value, goal: goal.value, workspacePath: workspace.value.trim(),
          ...(strategy.value !== 'none' ? { branchStrategy: strategy.value } : {}),
          ...(strategy.value === 'worktree' ? { delivery: delivery.value } : {}),
          ...(callback.value.trim() ? { callbackUrl: callback.value.trim() } : {}),
          ...agentConfig(),
        },
        extraHeaders: { 'Idempotency-Key': `console-${key}` },
      });
      localStorage.setItem(WORKSPACE_KEY, workspace.value.trim());
      navigate(`/sessions/${encodeURIComponent(answer.data.sessionId)}`);
    } catch (error) {
      showOutcome(outcome, errorText(error), true);
      button.disabled = false;
    }
  });
  return () => {};
}
