"""Bearer-token auth for `/api/v2` (SPEC §3.4). The loopback rule for a server without a token
is daemon/bind.py's."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from flask import request

from web.errors import ApiError


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "Missing or wrong bearer token.")


def expected_bearer(token: str) -> bytes:
    """The Authorization header's bytes that carry `token`: UTF-8, as curl or a browser send it."""
    return f"Bearer {token}".encode()


def bearer_ok(header: str, expected: bytes) -> bool:
    """Whether the Authorization header `header` (as the WSGI environ holds it) is `expected`.

    WSGI hands header values over as latin-1 text (PEP 3333), so encoding latin-1 gives back
    the bytes the client sent. A character beyond latin-1 cannot come from the wire: no
    match (never a look-alike by replacement). The comparison is constant time over bytes
    (hmac.compare_digest), so neither the token's content nor its length leaks through
    response timing beyond the length check.
    """
    try:
        given = header.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(given, expected)


def bearer_guard(token: str) -> Callable[[], None]:
    """A `before_request` hook: the request must carry `Authorization: Bearer <token>`."""
    expected = expected_bearer(token)

    def check() -> None:
        if not bearer_ok(request.headers.get("Authorization", ""), expected):
            raise unauthorized()

    return check
