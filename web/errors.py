"""One JSON shape for every answer (README's HTTP API): `success`, and on errors `code` + `error`.

Every error path ends here: API errors raised by the routes, Werkzeug's HTTP exceptions
(unknown route, wrong method, body too large, bad content type), Redis being unreachable or
not a writable primary (READONLY, NOREPLICAS, LOADING, MASTERDOWN: 503
`steer_bus_unavailable` with `Retry-After`, never a 500), a change WAIT could not confirm
on enough replicas (503 `not_replicated`), and anything unexpected (logged, 500 JSON).
No error is ever an HTML page.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from daemon.bus.replication import NotReplicated
from daemon.host.ids import is_session_id
from daemon.host.redisconn import is_outage

log = logging.getLogger(__name__)

JSON_MIMETYPE = "application/json"
RETRY_AFTER_SECONDS = "1"
SESSIONS_PATH = "/api/v2/sessions/"

SESSION_NOT_FOUND = "Session not found: no session with that id here (unknown, or expired)."
NO_STEER_CHANNEL = "Steer not available (not a daemon context)."


def dumps(body: Any) -> bytes:
    """Compact JSON; non-ASCII text is kept as UTF-8 (the response says so)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def json_response(body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(body), status=status, mimetype=JSON_MIMETYPE, headers=headers)


class ApiError(Exception):
    """An error answer: `raise ApiError(404, "session_not_found", "...")` from any route."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra or {}
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"success": False, "code": self.code, "error": self.message, **self.extra}

    def response(self) -> Response:
        return json_response(self.body(), self.status, self.headers)


def session_not_found() -> ApiError:
    return ApiError(404, "session_not_found", SESSION_NOT_FOUND)


def invalid_request(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


# Werkzeug's HTTP errors, as stable codes with plain sentences.
_HTTP_CODES: dict[int, tuple[str, str]] = {
    400: ("invalid_request", "The request could not be understood."),
    401: ("unauthorized", "Missing or wrong bearer token."),
    404: ("not_found", "No such route."),
    405: ("method_not_allowed", "Method not allowed on this route."),
    408: ("request_timeout", "The request did not arrive in time."),
    413: ("payload_too_large", "Request body too large (the limit is 1 MiB)."),
    415: ("unsupported_media_type", "Content-Type must be application/json."),
}


def _malformed_session_path(path: str) -> bool:
    """A path under /api/v2/sessions/ whose next segment is not a session id. (Under a valid
    id, an unknown path is an unknown route: the session may well exist.)"""
    if not path.startswith(SESSIONS_PATH):
        return False
    return not is_session_id(path[len(SESSIONS_PATH) :].split("/", 1)[0])


def http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    if status == 404 and _malformed_session_path(request.path):
        # A session id with a `/` in it (e.g. `sess_../../x`) matches no route: it is still a
        # malformed session id, and answers as one.
        return session_not_found().response()
    code, message = _HTTP_CODES.get(status, ("http_error", exc.name if exc.name else "HTTP error"))
    headers = {k: v for k, v in exc.get_headers() if k.lower() in ("allow", "retry-after")}
    return ApiError(status, code, message, headers=headers).response()


def steer_bus_unavailable(exc: Exception) -> ApiError:
    log.warning("Redis unreachable: %s", exc)
    return ApiError(
        503,
        "steer_bus_unavailable",
        "The steer bus (Redis) is unreachable; retry shortly.",
        headers={"Retry-After": RETRY_AFTER_SECONDS},
    )


def internal_error(exc: Exception) -> ApiError:
    log.exception("unexpected error while answering a request", exc_info=exc)
    return ApiError(500, "internal_error", "Internal error; it has been logged.")


def request_timeout() -> ApiError:
    return ApiError(408, "request_timeout", "The request did not arrive in time.")


def too_large() -> ApiError:
    return ApiError(413, *_HTTP_CODES[413])


def api_error_of(exc: Exception) -> ApiError:
    """The answer to what a route raised: its own ApiError; 503 `steer_bus_unavailable` when
    Redis did not answer or is failing over (READONLY, NOREPLICAS, LOADING, MASTERDOWN: not a
    bug); else a logged 500. The Flask app's handlers and the steer fast path answer with it."""
    if isinstance(exc, ApiError):
        return exc
    # redis.TimeoutError is not a ConnectionError subclass: both mean "Redis did not answer".
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError) or is_outage(exc):
        return steer_bus_unavailable(exc)
    return internal_error(exc)


def _answer(exc: Exception) -> Response:
    return api_error_of(exc).response()


CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def not_replicated(exc: NotReplicated) -> ApiError:
    log.warning("WAIT: %s: 503 not_replicated", exc)
    return ApiError(
        503,
        "not_replicated",
        f"The change was not confirmed by the replicas in time ({exc}); retry (the same clientMsgId "
        "or Idempotency-Key is safe).",
        headers={"Retry-After": RETRY_AFTER_SECONDS},
    )


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(HTTPException, http_error)
    app.register_error_handler(Exception, _answer)
