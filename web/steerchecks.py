"""A steer request's checks, in their order: the one list both ways a steer comes in run
(`SteerRoute.answer`: the Flask view, and the WSGI fast path of web/fastpath.py), so the two
answer every bad request alike. Each check reads the WSGI environ, which both ways have, and
raises the ApiError that answers the request:

1. `guarded`: the guard every `/api/v2` request passes (web/auth.py): 401 `unauthorized` or
   403 `forbidden_host`, 403 `forbidden_origin`, 415 `unsupported_media_type` for a body not
   declared JSON;
2. `has_channel`: 503 `no_steer_channel` without a steer bus (standalone mode);
3. `session_id`: 404 `session_not_found` for anything that cannot be a session id (never
   reaches Redis key building);
4. `length_allowed`: Content-Length not a non-negative integer, 400 `invalid_request`; over
   the body limit, 413 `payload_too_large`;
5. `body_read`: 408 `request_timeout` when the body stalls past the server's read deadline;
   one of unknown length (chunked) is read to its end, 413 as soon as it passes the limit;
6. `body_parsed`: 400 `invalid_request` (with the fields) for a body that is not a steer;
7. `text_within_limit`: 413 `steer_too_large` for a text over WORKTRAIN_MAX_STEER_BYTES.

Then the bus decides (README's rules, atomically: 404, 409, 422, 429). The checks from
`text_within_limit` on run inside the steer's span, as the accept does (`IN_THE_SPAN`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from daemon.host.config import Settings
from daemon.host.ids import is_session_id
from web.auth import Guard
from web.errors import (
    NO_STEER_CHANNEL,
    ApiError,
    invalid_request,
    request_timeout,
    session_not_found,
    too_large,
)
from web.models import SteerBody, parse_steer
from web.requestbasics import read_capped


@dataclass(frozen=True)
class SteerLimits:
    """README's HTTP API's caps: the text's UTF-8 size, and how many steers may wait per session."""

    max_bytes: int = 32768
    max_pending: int = 100
    max_edits: int = 20  # WORKTRAIN_MAX_STEER_EDITS: edits of one pending steer

    @classmethod
    def of(cls, settings: Settings) -> SteerLimits:
        return cls(settings.max_steer_bytes, settings.max_pending_steers, settings.max_steer_edits)

    def check_text(self, text: str) -> None:
        """413 `steer_too_large` for a text over `max_bytes` (a steer, or an edit of one)."""
        if len(text.encode()) > self.max_bytes:
            raise steer_too_large(self.max_bytes)


def steer_too_large(limit: int) -> ApiError:
    return ApiError(
        413, "steer_too_large", f"Steer text is over {limit} bytes of UTF-8 (WORKTRAIN_MAX_STEER_BYTES)."
    )


@dataclass(frozen=True)
class SteerPolicy:
    """What the checks hold a request to."""

    guard: Guard
    has_channel: bool
    max_body_bytes: int
    limits: SteerLimits


@dataclass
class SteerRequest:
    """One steer request as the checks see it, and what they have read of it so far."""

    environ: Mapping[str, Any]
    session_id: str
    length: int | None = None  # the body's declared length (None: unknown, a chunked body)
    raw: bytes = b""
    body: SteerBody | None = None


Check = Callable[[SteerPolicy, SteerRequest], None]


def guarded(policy: SteerPolicy, request: SteerRequest) -> None:
    policy.guard(request.environ)


def has_channel(policy: SteerPolicy, request: SteerRequest) -> None:
    if not policy.has_channel:
        raise ApiError(503, "no_steer_channel", NO_STEER_CHANNEL)


def session_id(policy: SteerPolicy, request: SteerRequest) -> None:
    if not is_session_id(request.session_id):
        raise session_not_found()


def length_allowed(policy: SteerPolicy, request: SteerRequest) -> None:
    declared = request.environ.get("CONTENT_LENGTH") or ""
    if not declared:
        return  # a chunked body: capped while it is read
    if not (declared.isascii() and declared.isdigit()):
        raise invalid_request("Content-Length must be a non-negative integer.")
    request.length = int(declared)
    if request.length > policy.max_body_bytes:
        raise too_large()


def body_read(policy: SteerPolicy, request: SteerRequest) -> None:
    stream = request.environ["wsgi.input"]
    try:
        if request.length is None:
            request.raw = read_capped(stream, policy.max_body_bytes)
        else:
            request.raw = stream.read(request.length)
    except TimeoutError:  # gunicorn's socket timeout (web/deadlines.py)
        raise request_timeout() from None


def body_parsed(policy: SteerPolicy, request: SteerRequest) -> None:
    request.body = parse_steer(request.raw)


def text_within_limit(policy: SteerPolicy, request: SteerRequest) -> None:
    assert request.body is not None  # body_parsed ran
    policy.limits.check_text(request.body.text)


STEER_CHECKS: tuple[Check, ...] = (
    guarded,
    has_channel,
    session_id,
    length_allowed,
    body_read,
    body_parsed,
    text_within_limit,
)
# The steer's span covers the checks from the text's size on, and the accept.
TRACED_FROM = STEER_CHECKS.index(text_within_limit)
BEFORE_THE_SPAN = STEER_CHECKS[:TRACED_FROM]
IN_THE_SPAN = STEER_CHECKS[TRACED_FROM:]


def run_checks(checks: tuple[Check, ...], policy: SteerPolicy, request: SteerRequest) -> None:
    """Each check in turn; the first refusal raises its ApiError."""
    for check in checks:
        check(policy, request)
