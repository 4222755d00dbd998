"""A WSGI fast path for the hot route: `POST /api/v2/sessions/<id>/steer` without Flask.

Flask's request machinery (contexts, Request/Response objects, routing, hooks) costs more
CPU than everything the steer itself does except the Redis round trip (measured:
docs/benchmarks.md). This middleware sits in front of the Flask app, recognises the steer
route from the WSGI environ alone, and answers it with the very same logic
(`SteerRoute.answer`) and the very same JSON bodies, status codes and headers. Everything
else, and any steer it declines (no Content-Length, e.g. a chunked body), goes to Flask,
whose steer view is the same code.

The checks keep the Flask route's order: the guard (401 bearer token, or 403 Host), no bus
(503), session id (404), Content-Type (415), size (413), body (400), text size (413), then
the bus (whose pending cap answers 429).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

import redis

from daemon.bus.replication import Replication
from daemon.host.redisconn import is_outage
from web.auth import Guard
from web.errors import (
    JSON_MIMETYPE,
    ApiError,
    dumps,
    internal_error,
    invalid_request,
    request_timeout,
    steer_bus_unavailable,
    too_large,
)
from web.replicated import confirm_or_error, step_for
from web.requestbasics import unsupported_media
from web.steer import SteerRoute

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

PREFIX = "/api/v2/sessions/"
SUFFIX = "/steer"
STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}


def is_json_mimetype(content_type: str) -> bool:
    """As Werkzeug's `Request.is_json`: application/json or application/*+json."""
    mimetype = content_type.split(";", 1)[0].strip().lower()
    return mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    )


class SteerFastPath:
    def __init__(
        self,
        inner: WSGIApp,
        route: SteerRoute,
        guard: Guard,
        max_length: int,
        replication: Replication | None = None,
    ) -> None:
        self.replication = replication if replication is not None and replication.enabled else None
        self.inner = inner
        self.route = route
        self.guard = guard
        self.max_length = max_length

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
            self.guard(environ)
            status, body = self.route.answer(
                session_id, lambda: self._read_body(environ), environ.get("HTTP_TRACEPARENT")
            )
        except ApiError as exc:
            status, body, headers = exc.status, exc.body(), exc.headers
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            error = steer_bus_unavailable(exc)
            status, body, headers = error.status, error.body(), error.headers
        except Exception as exc:  # noqa: BLE001  # logged by internal_error; the answer stays JSON
            error = steer_bus_unavailable(exc) if is_outage(exc) else internal_error(exc)
            status, body, headers = error.status, error.body(), error.headers
        return status, body, headers

    def _read_body(self, environ: dict[str, Any]) -> bytes:
        if not is_json_mimetype(environ.get("CONTENT_TYPE", "")):
            raise unsupported_media()
        raw_length = environ["CONTENT_LENGTH"]
        if not (raw_length.isascii() and raw_length.isdigit()):
            raise invalid_request("Content-Length must be a non-negative integer.")
        length = int(raw_length)
        if length > self.max_length:
            raise too_large()
        try:
            data: bytes = environ["wsgi.input"].read(length)
        except TimeoutError:  # gunicorn's socket timeout (web/deadlines.py)
            raise request_timeout() from None
        return data
