"""What several route modules need of a request, on the ground floor of web/ (imports only
web/errors.py): the session id in the path, the JSON body, and the 503 of a full wait bound.
Each route module (sessions.py, steerpost.py, steeredits.py, ...) imports this one, never
another route module.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, request

from daemon.host.ids import is_session_id
from web.errors import ApiError, request_timeout, session_not_found, too_large

WAITS_RETRY_AFTER_SECONDS = "1"


def require_session_id(session_id: str) -> str:
    """The path's session id, or 404 `session_not_found` for anything that cannot be one."""
    if not is_session_id(session_id):
        raise session_not_found()
    return session_id


def unsupported_media() -> ApiError:
    return ApiError(415, "unsupported_media_type", "Content-Type must be application/json.")


def json_body() -> bytes:
    """The raw body of a JSON request (size-capped by MAX_CONTENT_LENGTH: 413 beyond it;
    408 when it stalls past the server's read deadline)."""
    if not request.is_json:
        raise unsupported_media()
    try:
        if request.content_length is None:  # chunked: Werkzeug would cut it at the limit silently
            return read_capped(request.environ["wsgi.input"], current_app.config["MAX_CONTENT_LENGTH"])
        return request.get_data(cache=False)
    except TimeoutError:  # gunicorn's socket timeout (web/deadlines.py)
        raise request_timeout() from None


def read_capped(stream: Any, limit: int) -> bytes:
    """A body of unknown length, read to its end: 413 as soon as it passes `limit` bytes."""
    chunks, total = [], 0
    while chunk := stream.read(min(65536, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise too_large()
    return b"".join(chunks)


def too_many_waits() -> ApiError:
    """503 with Retry-After: this process holds its bound of long waits (receipts, signals)."""
    return ApiError(
        503,
        "too_many_waits",
        "Too many receipt waits are open on this server; retry shortly.",
        headers={"Retry-After": WAITS_RETRY_AFTER_SECONDS},
    )
