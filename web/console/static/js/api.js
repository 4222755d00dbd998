// The console's only way out: /api/v2 of its own origin, JSON requests and live event streams.
//
// The token (when the server wants one) lives in this tab's sessionStorage and travels only
// as the `Authorization: Bearer` header: never in a URL, never in a cookie. EventSource
// cannot send headers, so live streams are read with fetch() and a streaming body reader.
// Any 401 clears the token and hands control to the sign-in page (onUnauthorized).

import { sleep } from './dom.js';

const API = '/api/v2';
const TOKEN_KEY = 'worktrain.apiToken';
const MAX_BACKOFF_MS = 15000;
const MIN_RETRY_MS = 2000; // pages read again at each retry: never a loop faster than 2 s
export const POLL_MS = 3000; // the fallback when no live stream exists (standalone): never faster than 2 s

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

let unauthorized = () => {};
/** Who to call when the server answers 401 (the sign-in page). */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export class ApiError extends Error {
  constructor(status, code, message, body = null, retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
    this.retryAfter = retryAfter;
  }
}

function headers(extra, bearer) {
  const result = { Accept: 'application/json', ...extra };
  const value = bearer === undefined ? token.get() : bearer;
  if (value) result.Authorization = `Bearer ${value}`;
  return result;
}

/**
 * One JSON request. Resolves with the body of a success; throws ApiError with the API's
 * `code` and sentence otherwise (`network_error` when the server cannot be reached).
 * `bearer` tries a token that is not stored yet (sign-in): its 401 is the caller's.
 */
export async function api(method, path, { body, extraHeaders, signal, bearer } = {}) {
  const init = { method, headers: headers(extraHeaders, bearer), signal, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) init.body = JSON.stringify(body);
  // Every state change is declared JSON, body or not: the server refuses it otherwise (415).
  if (body !== undefined || method !== 'GET') init.headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(API + path, init);
  } catch (error) {
    if (error.name === 'AbortError') throw error;
    throw new ApiError(0, 'network_error', 'The WorkTrain server could not be reached.');
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (response.status === 401 && bearer === undefined) unauthorized();
  if (!response.ok || !data || data.success === false) {
    throw new ApiError(
      response.status,
      data?.code || 'http_error',
      data?.error || `The server answered HTTP ${response.status}.`,
      data,
      response.headers.get('Retry-After'),
    );
  }
  return data;
}

/** Split an SSE body into messages {id, event, data, retry}; calls onMessage for each. */
async function readEventStream(body, onMessage, signal) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const cancel = () => reader.cancel().catch(() => {});
  signal.addEventListener('abort', cancel, { once: true });
  try {
    await readMessages(reader, onMessage);
  } finally {
    signal.removeEventListener('abort', cancel);
  }
}

async function readMessages(reader, onMessage) {
  let rest = '';
  let message = { data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const lines = (rest + value).split('\n');
    rest = lines.pop();
    for (const raw of lines) {
      const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
      if (line === '') {
        if (message.data.length || message.retry) onMessage({ ...message, data: message.data.join('\n') });
        message = { data: [] };
        continue;
      }
      if (line.startsWith(':')) continue; // keep-alive comment
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'data') message.data.push(text);
      else if (field === 'id') message.id = text;
      else if (field === 'event') message.event = text;
      else if (field === 'retry' && /^\d+$/.test(text)) message.retry = Number(text);
    }
  }
}

/**
 * Follow an SSE route of the API. Reconnects (with Last-Event-ID) when the connection
 * drops, backing off; a 503 waits what Retry-After says. Returns stop().
 * opts: onEvent(event, id), onOpen(), onState('connecting'|'live'|'reconnecting'|'ended'),
 * onError(ApiError) for an answer that will not get better (404: stop), isFinal(event):
 * stop after that event, shouldReconnect(): false stops after the server closed the stream.
 */
export function follow(path, opts) {
  const controller = new AbortController();
  const { signal } = controller;
  let lastId = opts.since || null;
  let retryMs = MIN_RETRY_MS;
  let failures = 0;
  const state = (s) => opts.onState?.(s);

  const once = async () => {
    const extra = { Accept: 'text/event-stream' };
    if (lastId) extra['Last-Event-ID'] = lastId;
    const response = await fetch(API + path, { headers: headers(extra), signal, cache: 'no-store', credentials: 'omit' });
    if (response.status === 401) {
      unauthorized();
      return 'stop';
    }
    const type = response.headers.get('Content-Type') || '';
    if (!response.ok || !type.startsWith('text/event-stream')) {
      const data = await response.json().catch(() => null);
      const error = new ApiError(response.status, data?.code || 'http_error', data?.error || `HTTP ${response.status}`, data);
      if (response.status === 404 || response.status === 400) {
        opts.onError?.(error);
        return 'stop';
      }
      const wait = Number(response.headers.get('Retry-After'));
      return wait > 0 ? Math.max(wait * 1000, MIN_RETRY_MS) : 'retry';
    }
    failures = 0;
    state('live');
    opts.onOpen?.();
    let final = false;
    await readEventStream(response.body, (message) => {
      if (message.retry) retryMs = Math.max(message.retry, MIN_RETRY_MS);
      if (message.id) lastId = message.id;
      if (!message.data) return;
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        return;
      }
      opts.onEvent(event, message.id);
      if (opts.isFinal?.(event)) final = true;
    }, signal);
    return final || opts.shouldReconnect?.() === false ? 'stop' : 'retry';
  };

  (async () => {
    state('connecting');
    while (!signal.aborted) {
      let next;
      try {
        next = await once();
      } catch (error) {
        if (signal.aborted) return;
        next = 'retry';
      }
      if (signal.aborted) return;
      if (next === 'stop') {
        state('ended');
        return;
      }
      failures += 1;
      state('reconnecting');
      const backoff = Math.min(retryMs * 2 ** Math.min(failures - 1, 3), MAX_BACKOFF_MS);
      await sleep(typeof next === 'number' ? next : backoff, signal);
    }
  })();
  return () => controller.abort();
}

/**
 * Read a paged route (`items` names its list: 'events', 'issues') from `cursor` to its end,
 * calling onBatch(list) for each non-empty page. Resolves with the cursor to read on from.
 */
export async function readPages(path, { items, cursor = '', onBatch, signal, pageSize = 1000 }) {
  for (;;) {
    const sep = path.includes('?') ? '&' : '?';
    const query = `${sep}limit=${pageSize}${cursor ? `&since=${encodeURIComponent(cursor)}` : ''}`;
    const page = (await api('GET', path + query, { signal })).data;
    cursor = page.next || cursor;
    const list = page[items] || [];
    if (list.length) await onBatch(list);
    if (list.length < pageSize) return cursor;
  }
}

/**
 * The fallback where no live stream exists (standalone): read a paged route from the start,
 * then every POLL_MS for what is new. onCaughtUp() once, when the backlog has been read.
 */
export function poll(path, { items, onBatch, onCaughtUp, onState }) {
  const controller = new AbortController();
  const { signal } = controller;
  (async () => {
    let cursor = '';
    let caughtUp = false;
    onState?.('connecting');
    while (!signal.aborted) {
      try {
        cursor = await readPages(path, { items, cursor, onBatch, signal });
        onState?.('polling');
        if (!caughtUp) {
          caughtUp = true;
          onCaughtUp?.();
        }
      } catch (error) {
        if (signal.aborted) return;
        onState?.('reconnecting');
      }
      await sleep(POLL_MS, signal);
    }
  })();
  return () => controller.abort();
}

/** The workflow catalog, read once per page load (it changes only when the server restarts). */
let catalog = null;
export function workflows() {
  if (!catalog) {
    catalog = api('GET', '/workflows').then((body) => body.data).catch((error) => {
      catalog = null;
      throw error;
    });
  }
  return catalog;
}

/** The title of step `stepId` of workflow `workflowId`, from the catalog ('' if unknown). */
export async function stepTitle(workflowId, stepId) {
  if (!stepId) return '';
  try {
    const data = await workflows();
    const flow = data.workflows.find((w) => w.id === workflowId);
    const step = flow?.steps?.find((s) => s.id === stepId);
    return step?.title || '';
  } catch {
    return '';
  }
}

export function resetCatalog() {
  catalog = null;
}
