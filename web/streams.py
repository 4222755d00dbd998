"""Stream routes: pages of `wt:events` / `wt:issues`, and events live as SSE.

`GET /api/v2/sessions/<id>/events` streams the session's own event stream as Server-Sent
Events: each stream entry is one SSE message whose `id` is the stream entry id and whose
`event` is the event's `kind`. It starts from the beginning, or after `Last-Event-ID` (the
header a reconnecting EventSource sends; `?since=` does the same for other clients), and
ends after `session_completed`. It polls with XREAD BLOCK of `BLOCK_MS`; between events it
sends a comment line every `KEEPALIVE_SECONDS` so idle proxies keep the connection.

`GET /api/v2/events` with `Accept: text/event-stream` (the console's Sessions and Issues
pages) is the same for `wt:events` (or `?sessionId=`'s stream), except that it starts at the
stream's end unless `Last-Event-ID`/`since` says otherwise, and never ends by itself. Any
other Accept gets the JSON page, as before; standalone mode has no live stream.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from flask import Response, request

from daemon.events import STREAM_FIELD
from daemon.ids import is_session_id
from daemon.keys import Keys
from daemon.records import FINISHED_STATUSES
from web.errors import invalid_request, json_response, session_not_found
from web.readers import EventReader, valid_stream_id
from web.sessions import MAX_PAGE, int_arg, require_session_id

log = logging.getLogger(__name__)

BLOCK_MS = 1000
KEEPALIVE_SECONDS = 15
SSE_BATCH = 100


def _cursor(reader: EventReader, name: str = "since") -> str:
    since = request.args.get(name, "")
    if not reader.valid_cursor(since):
        raise invalid_request(f"{name} must be a cursor returned as `next` (or a stream id).")
    return since


def _session_arg() -> str | None:
    session_id = request.args.get("sessionId") or None
    if session_id is not None and not is_session_id(session_id):
        raise invalid_request("sessionId must be a session id (sess_ + 26-char ULID).")
    return session_id


def wants_event_stream() -> bool:
    """Whether the client asked for SSE by name (a bare `*/*` is not asking)."""
    return any(value == "text/event-stream" and q > 0 for value, q in request.accept_mimetypes)


@dataclass(frozen=True)
class StreamRoutes:
    reader: EventReader
    live: LiveEvents | None = None  # None: no Redis (standalone), pages only

    def events(self) -> Response:
        if self.live is not None and wants_event_stream():
            return self.live.events()
        session_id = _session_arg()
        page = self.reader.events_page(session_id, _cursor(self.reader), int_arg("limit", 100, 1, MAX_PAGE))
        return json_response({"success": True, "data": {"events": page.items, "next": page.next}})

    def issues(self) -> Response:
        session_id = _session_arg()
        page = self.reader.issues_page(session_id, _cursor(self.reader), int_arg("limit", 100, 1, MAX_PAGE))
        return json_response({"success": True, "data": {"issues": page.items, "next": page.next}})


def sse_message(entry_id: str, data: str) -> tuple[bytes, bool]:
    """One SSE message, and whether it is the session's last (`session_completed`)."""
    try:
        kind = str(json.loads(data).get("kind", "message"))
    except (ValueError, AttributeError):
        kind = "message"
    # Event JSON is one line (encoders escape newlines), so one `data:` line carries it.
    return f"id: {entry_id}\nevent: {kind}\ndata: {data}\n\n".encode(), kind == "session_completed"


def _last_event_id() -> str | None:
    after = request.headers.get("Last-Event-ID") or request.args.get("since") or None
    if after is not None and not valid_stream_id(after):
        raise invalid_request("Last-Event-ID must be an event id of this stream.")
    return after


def _sse_response(chunks: Iterator[bytes]) -> Response:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return Response(chunks, mimetype="text/event-stream", headers=headers)


@dataclass(frozen=True)
class SessionEventStream:
    client: redis.Redis
    keys: Keys

    def events(self, session_id: str) -> Response:
        keys = self.keys.session(require_session_id(session_id))
        after = _last_event_id() or "0-0"
        if not self.client.exists(keys.record):
            raise session_not_found()
        return _sse_response(self._stream(keys.events, keys.record, after))

    def _stream(self, stream_key: str, record_key: str | None, after: str) -> Iterator[bytes]:
        """The entries of `stream_key` after `after`, as SSE. With a `record_key` the stream
        ends with its session (see the module docstring); without one, only when the client
        goes away."""
        last, idle_ms, finished_seen = after, 0, False
        yield b"retry: 2000\n\n"
        try:
            while True:
                reply: Any = self.client.xread({stream_key: last}, count=SSE_BATCH, block=BLOCK_MS)
                if reply:
                    idle_ms = 0
                    entries: list[tuple[str, dict[str, str]]] = reply[0][1]
                    for entry_id, fields in entries:
                        last = entry_id
                        message, final = sse_message(entry_id, fields.get(STREAM_FIELD, "{}"))
                        yield message
                        if final:
                            return
                    continue
                # Nothing new. A session that finished without (or before) its last event in
                # this stream would keep us forever: seen finished on two idle polls → done.
                status = self.client.hget(record_key, "status") if record_key else ""
                if status is None or status in FINISHED_STATUSES:
                    if finished_seen:
                        return
                    finished_seen = True
                idle_ms += BLOCK_MS
                if idle_ms >= KEEPALIVE_SECONDS * 1000:
                    idle_ms = 0
                    yield b": keepalive\n\n"
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # The answer has started: no JSON error is possible any more. The client
            # reconnects with Last-Event-ID and resumes where it was.
            log.warning("SSE stream of %s ended: Redis unreachable (%s)", stream_key, exc)
        except redis.ResponseError as exc:
            # Redis refused a read (the id is checked up front, so e.g. WRONGTYPE): end the
            # stream rather than break it mid-answer.
            log.warning("SSE stream of %s ended: Redis refused the read after %s (%s)", stream_key, last, exc)


@dataclass(frozen=True)
class LiveEvents:
    """`GET /api/v2/events` as SSE (see the module docstring): what happens from now on."""

    sessions: SessionEventStream

    def events(self) -> Response:
        client, keys = self.sessions.client, self.sessions.keys
        session_id = _session_arg()
        key = keys.events if session_id is None else keys.session(session_id).events
        after = _last_event_id()
        if after is None:
            # "From now" resolved to a concrete id once: XREAD with `$` on every poll would
            # miss what arrives between two polls.
            tail: Any = client.xrevrange(key, count=1)
            after = tail[0][0] if tail else "0-0"
        return _sse_response(self.sessions._stream(key, None, after))
