"""Coordinator signal routes (README's Sub-agents and questions): a session's signals (a long poll), and
every session's.

`GET /api/v2/sessions/<id>/signals?since=&limit=&wait=S` answers the signals after `since`;
when there is none and `wait` is given, it holds the request on an XREAD BLOCK on the
session's signal stream (daemon/bus/session/signals.py) and answers the moment one lands, or empty
after S seconds (at most 60). A wait holds a server thread, so at most `max_waits` run at
once per process (shared with nothing else); one more answers 503 `too_many_waits`.
`GET /api/v2/signals?since=` pages the global stream `wt:signals` by entry id.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flask import Response, request

from daemon.bus.session.registry import record_fields
from daemon.bus.session.signals import SignalStream
from daemon.bus.session.steerbus import SteerBus
from daemon.schema.records import SessionStatus
from web.errors import invalid_request, json_response, session_not_found
from web.models import SignalsQuery, StreamQuery, parse_query
from web.readers import RedisReader, signals_page
from web.requestbasics import require_session_id, too_many_waits

MAX_SIGNAL_WAITS = 32


@dataclass
class SignalRoutes:
    bus: SteerBus
    max_waits: int = MAX_SIGNAL_WAITS
    monotonic: Callable[[], float] = time.monotonic
    stream: SignalStream = field(init=False)
    _waits: threading.BoundedSemaphore = field(init=False)

    def __post_init__(self) -> None:
        self.stream = SignalStream(self.bus.client, self.bus.keys)
        self._waits = threading.BoundedSemaphore(self.max_waits)

    def session_signals(self, session_id: str) -> Response:
        query = parse_query(SignalsQuery, request.args)
        require_session_id(session_id)
        [status] = record_fields(self.bus.client, self.bus.keys, session_id, "status")
        if status is None:
            raise session_not_found()
        if not query.wait or SessionStatus(status).finished:  # an ended session says no more
            page, _ = self.stream.page(session_id, query.since, query.limit)
        elif not self._waits.acquire(blocking=False):
            raise too_many_waits()
        else:
            try:
                page = self.stream.wait(session_id, query.since, query.limit, query.wait, self.monotonic)
            finally:
                self._waits.release()
        data = {
            "sessionId": session_id,
            "signals": [signal.model_dump(mode="json") for signal in page.signals],
            "next": page.next,
        }
        return json_response({"success": True, "data": data})

    def all_signals(self) -> Response:
        query = parse_query(StreamQuery, request.args)
        reader = RedisReader(self.bus.client, self.bus.keys)
        if not reader.valid_cursor(query.since):
            raise invalid_request("since must be a cursor returned as `next` (or a stream id).")
        page = signals_page(reader, query.since, query.limit)
        items = page.items
        if query.sessionId is not None:
            items = [item for item in items if item.get("sessionId") == query.sessionId]
        return json_response({"success": True, "data": {"signals": items, "next": page.next}})
