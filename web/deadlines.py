"""Slow clients (README's HTTP API): a client that stops sending halfway through a request must not
take the API down with it.

- gunicorn (`TimedThreadWorker`): each client socket gets a read timeout, so headers or a
  body that stall raise in the thread reading them; the connection is dropped (408 where
  the answer can still be sent) and the thread is free again.
- granian: its header read has a timeout (web/serve.py), its body read has none (granian
  #728, "wontfix"): it blocks in Rust, and reading it from another thread to give up on it
  stalls the whole worker process (measured). So `BodySlots` bounds the damage instead:
  requests with a body take a slot of the process's thread budget (web/threadbudget.py,
  shared with SSE streams and receipt waits; the others wait briefly for a slot, then
  answer 503 `server_busy`), which always leaves threads for requests without one (reads,
  cancels, /readyz). Only clients that passed the token and origin checks ever read a
  body: one without the token is answered 401 with its body unread, holding no thread.
  Exposed beyond loopback, put a buffering proxy in front (README, "Exposing the API"): it
  receives whole bodies before forwarding them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker

from web.errors import ApiError, dumps
from web.threadbudget import Slots

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
DEFAULT_READ_SECONDS = 10.0
BUSY = ApiError(
    503,
    "server_busy",
    "Too many requests with a body are in progress on this server; retry shortly.",
    headers={"Retry-After": "1"},
)


def has_body(environ: dict[str, Any]) -> bool:
    return (
        environ.get("CONTENT_LENGTH") not in (None, "", "0")
        or "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    )


class BodySlots:
    """WSGI middleware: at most `slots` requests with a body at once (see the module doc):
    a number, or the slots of the process's thread budget (web/threadbudget.py), shared with
    streams and receipt waits."""

    def __init__(self, app: WSGIApp, slots: int | Slots, wait_seconds: float = DEFAULT_READ_SECONDS) -> None:
        self.app = app
        self.wait_seconds = wait_seconds
        self.slots: Slots = threading.BoundedSemaphore(slots) if isinstance(slots, int) else slots

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not has_body(environ):
            return self.app(environ, start_response)
        if not self.slots.acquire(timeout=self.wait_seconds):
            payload = dumps(BUSY.body())
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
            start_response("503 Service Unavailable", headers + list((BUSY.headers or {}).items()))
            return [payload]
        try:
            # The body is read while the app runs; the answer to a body is never streamed.
            result = self.app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        finally:
            self.slots.release()


class TimedConnection(TConn):  # type: ignore[misc]
    """A gthread connection whose socket reads time out (after gunicorn made it blocking)."""

    read_seconds = DEFAULT_READ_SECONDS

    def init(self) -> None:
        super().init()
        self.sock.settimeout(self.read_seconds)


class TimedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker with a read timeout on every client socket: 12 clients
    sending half a header no longer hold its 12 threads."""

    def enqueue_req(self, conn: TConn) -> None:
        conn.__class__ = TimedConnection  # same state, one method more
        super().enqueue_req(conn)
