"""Stream routes: pages of `wt:events` / `wt:issues`, and one session's events as SSE.

`GET /api/v2/sessions/<id>/events` streams the session's own event stream as Server-Sent
Events: each stream entry is one SSE message whose `id` is the stream entry id and whose
`event` is the event's `kind`. It starts from the beginning, or after `Last-Event-ID` (the
header a reconnecting EventSource sends; `?since=` does the same for other clients), and
ends after `session_completed`. It polls with XREAD BLOCK of `BLOCK_MS`; between events it
sends a comment line every `KEEPALIVE_SECONDS`, which keeps idle proxies from closing the
connection and lets the server notice a client that left (the write fails) within seconds.

`GET /api/v2/events` with `Accept: text/event-stream` (the console's Sessions and Issues
pages) is the same for `wt:events` (or `?sessionId=`'s stream), except that it starts at the
stream's end unless `Last-Event-ID`/`since` says otherwise, and never ends by itself. Any
other Accept gets the JSON page; standalone mode has no live stream.

Each open stream holds a server thread, so a process serves at most `max_streams` at once
(session and live streams together); one more answers 503 `too_many_streams` with
Retry-After (the EventSource reconnects).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis
from flask import Response, request

from daemon.bus.keys import Keys
from daemon.bus.session.registry import record_exists, record_fields
from daemon.bus.streams.eventsink import STREAM_FIELD
from daemon.bus.streams.reads import StreamReads, valid_stream_id
from daemon.schema.records import FINISHED_STATUSES
from web.errors import ApiError, invalid_request, json_response, session_not_found
from web.models import StreamQuery, parse_query
from web.readers import EventReader
from web.requestbasics import require_session_id
from web.threadbudget import Slots, ThreadBudget

log = logging.getLogger(__name__)

BLOCK_MS = 1000
FINISHED_GRACE_MS = 250  # a finished session's stream waits this long for a last event
KEEPALIVE_SECONDS = 2
SSE_BATCH = 100
STREAMS_RETRY_AFTER_SECONDS = "2"


def _page_query(reader: EventReader) -> StreamQuery:
    query = parse_query(StreamQuery, request.args)
    if not reader.valid_cursor(query.since):
        raise invalid_request("since must be a cursor returned as `next` (or a stream id).")
    return query


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
        query = _page_query(self.reader)
        page = self.reader.events_page(query.sessionId, query.since, query.limit)
        return json_response({"success": True, "data": {"events": page.items, "next": page.next}})

    def issues(self) -> Response:
        query = _page_query(self.reader)
        page = self.reader.issues_page(query.sessionId, query.since, query.limit)
        return json_response({"success": True, "data": {"issues": page.items, "next": page.next}})


def sse_message(entry_id: str, data: str) -> tuple[bytes, bool]:
    """One SSE message, and whether it is the session's last (`session_completed`)."""
    try:
        kind = str(json.loads(data).get("kind", "message"))
    except (ValueError, AttributeError):
        kind = "message"
    # Event JSON is one line (encoders escape newlines), so one `data:` line carries it.
    return f"id: {entry_id}\nevent: {kind}\ndata: {data}\n\n".encode(), kind == "session_completed"


class SlotStream:
    """A response body holding one stream slot, released exactly once: when it ends, or when
    the server closes it (the client left) — even if it never started (a generator's
    `finally` would not run then)."""

    def __init__(self, messages: Iterator[bytes], slots: Slots) -> None:
        self.messages = messages
        self.slots: Slots | None = slots
        self.lock = threading.Lock()

    def __iter__(self) -> SlotStream:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self.messages)
        except StopIteration:
            self.release()
            raise

    def close(self) -> None:
        try:
            close = getattr(self.messages, "close", None)
            if close is not None:
                close()
        finally:
            self.release()

    def release(self) -> None:
        with self.lock:
            slots, self.slots = self.slots, None
        if slots is not None:
            slots.release()


def too_many_streams() -> ApiError:
    return ApiError(
        503,
        "too_many_streams",
        "Too many event streams are open on this server; retry shortly.",
        headers={"Retry-After": STREAMS_RETRY_AFTER_SECONDS},
    )


def _resume_point() -> str | None:
    """Where the stream starts: after `Last-Event-ID` (or `?since=`); None when neither is given.

    A header that is present but empty or not a stream id is refused (400), never read as
    "not given": some servers hand a non-ASCII header value over as an empty string."""
    if "HTTP_LAST_EVENT_ID" in request.environ:
        after = request.environ["HTTP_LAST_EVENT_ID"]
    else:
        after = request.args.get("since") or None
        if after is None:
            return None
    if not valid_stream_id(after):
        raise invalid_request("Last-Event-ID must be an event id of this stream.")
    return str(after)


@dataclass(frozen=True)
class SessionEventStream:
    client: redis.Redis
    keys: Keys
    max_streams: int = 4
    budget: ThreadBudget | None = None  # shared with receipt waits and bodies (web/threadbudget.py)
    _slots: Slots = field(init=False, repr=False, compare=False)
    reads: StreamReads = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        own = threading.BoundedSemaphore(self.max_streams)
        slots = self.budget.holder(self.max_streams) if self.budget is not None else own
        object.__setattr__(self, "_slots", slots)
        object.__setattr__(self, "reads", StreamReads(self.client, self.keys))

    def events(self, session_id: str) -> Response:
        keys = self.keys.session(require_session_id(session_id))
        after = _resume_point() or "0-0"
        if not record_exists(self.client, self.keys, session_id):
            raise session_not_found()
        return self.stream(keys.events, session_id, after)

    def stream(self, stream_key: str, session_id: str | None, after: str) -> Response:
        """The SSE answer for `stream_key` after `after`, holding one of the stream slots.
        With a `session_id` it ends with that session; without one, when the client leaves."""
        if not self._slots.acquire(blocking=False):
            raise too_many_streams()
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        body = SlotStream(self._messages(stream_key, session_id, after), self._slots)
        return Response(body, mimetype="text/event-stream", headers=headers)

    def _finished(self, session_id: str | None) -> bool:
        if session_id is None:
            return False
        [status] = record_fields(self.client, self.keys, session_id, "status")
        return status is None or status in FINISHED_STATUSES

    def _messages(self, stream_key: str, session_id: str | None, after: str) -> Iterator[bytes]:
        last, idle_ms = after, 0
        yield b"retry: 2000\n\n"
        try:
            finished_seen = self._finished(session_id)
            while True:
                block = FINISHED_GRACE_MS if finished_seen else BLOCK_MS
                entries = self.reads.follow(stream_key, last, SSE_BATCH, block)
                if entries:
                    idle_ms = 0
                    for entry_id, fields in entries:
                        last = entry_id
                        message, final = sse_message(entry_id, fields.get(STREAM_FIELD, "{}"))
                        yield message
                        if final:
                            return
                    continue
                # Nothing new. A session that finished without (or before) its last event in
                # this stream would keep us forever: idle once more after seeing it finished
                # (a short grace for a `session_completed` on its way), then done.
                if finished_seen:
                    return
                finished_seen = self._finished(session_id)
                idle_ms += block
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
        keys = self.sessions.keys
        session_id = parse_query(StreamQuery, request.args).sessionId
        key = keys.events if session_id is None else keys.session(session_id).events
        after = _resume_point()
        if after is None:
            # "From now" resolved to a concrete id once: XREAD with `$` on every poll would
            # miss what arrives between two polls.
            after = self.sessions.reads.last_id(key) or "0-0"
        return self.sessions.stream(key, None, after)
