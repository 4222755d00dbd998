"""A WSGI fast path for the hot route: `POST /api/v2/sessions/<id>/steer` without Flask.

Flask's request machinery (contexts, Request/Response objects, routing, hooks) costs more
CPU than everything the steer itself does except the Redis round trip (measured:
docs/benchmarks.md). This middleware sits in front of the Flask app, recognises the steer
route from the WSGI environ alone, and answers it with the very same logic
(`SteerRoute.answer`) and the very same JSON bodies, status codes and headers. Everything
else, and any steer it declines (no Content-Length, e.g. a chunked body), goes to Flask,
whose steer view is the same code.

Both run the same checks, in the same order (web/steerchecks.py: the guard, the steer
channel, the session id, the body's length, reading and parsing it, the text's size), then
the bus; an exception is answered as the Flask app's error handlers answer it
(`web.errors.api_error_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from daemon.bus.replication import Replication
from web.errors import JSON_MIMETYPE, api_error_of, dumps
from web.replicated import confirm_or_error, step_for
from web.steerpost import SteerRoute

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

PREFIX = "/api/v2/sessions/"
SUFFIX = "/steer"
STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}


class SteerFastPath:
    def __init__(self, inner: WSGIApp, route: SteerRoute, replication: Replication | None = None) -> None:
        self.replication = replication if replication is not None and replication.enabled else None
        self.inner = inner
        self.route = route

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("CONTENT_LENGTH"):
            path: str = environ.get("PATH_INFO", "")
            if path.startswith(PREFIX) and path.endswith(SUFFIX):
                session_id = path[len(PREFIX) : -len(SUFFIX)]
                if "/" not in session_id:
                    return self._steer(environ, start_response, session_id)
        return self.inner(environ, start_response)

    def _steer(
        self, environ: dict[str, Any], start_response: Callable[..., Any], session_id: str
    ) -> Iterable[bytes]:
        with step_for(self.replication) as step:  # the accept and its WAIT on one connection
            status, body, headers = self._answer(environ, session_id)
            if status == 200 and self.replication is not None:
                unconfirmed = confirm_or_error(self.replication, step)
                if unconfirmed is not None:
                    status, body, headers = unconfirmed.status, unconfirmed.body(), unconfirmed.headers
        payload = dumps(body)
        header_list = [("Content-Type", JSON_MIMETYPE), ("Content-Length", str(len(payload)))]
        if headers:
            header_list.extend(headers.items())
        start_response(STATUS_LINES[status], header_list)
        return [payload]

    def _answer(
        self, environ: dict[str, Any], session_id: str
    ) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        headers: dict[str, str] | None = None
        try:
            status, body = self.route.answer(session_id, environ)
        except Exception as exc:  # noqa: BLE001  # answered as Flask's handlers answer it (a bug: logged)
            error = api_error_of(exc)
            status, body, headers = error.status, error.body(), error.headers
        return status, body, headers
