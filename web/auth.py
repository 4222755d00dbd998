"""Bearer-token auth for `/api/v2` (SPEC §3.4) and the loopback rule for a server without one."""

from __future__ import annotations

import hmac
import ipaddress
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


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1 (with or without brackets)."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


class UnsafeBind(Exception):
    """The server was asked to listen beyond loopback without an API token."""


def check_bind(host: str, token: str | None) -> None:
    if token:
        return
    if not is_loopback(host):
        raise UnsafeBind(
            f"refusing to listen on {host!r} without WORKTRAIN_API_TOKEN: anyone who can reach "
            "that address could steer and dispatch agents. Set WORKTRAIN_API_TOKEN, or bind to "
            "127.0.0.1 (WORKTRAIN_BIND / --bind)."
        )
