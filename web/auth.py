"""Who may use `/api/v2` (SPEC §3.4), decided from the WSGI environ alone.

With `WORKTRAIN_API_TOKEN`: the request must carry `Authorization: Bearer <token>` (401
`unauthorized`). Without one the server listens on loopback only (daemon/host/bind.py), and a
request whose `Host` is not a loopback name is refused (403 `forbidden_host`): a page on
another site that rebinds its DNS name to 127.0.0.1 still sends its own name as the Host.
`request_guard` is the one check, shared by the Flask app and the steer fast path.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any

from daemon.host.bind import is_loopback_host
from web.errors import ApiError

Guard = Callable[[Mapping[str, Any]], None]


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "Missing or wrong bearer token.")


def forbidden_host() -> ApiError:
    return ApiError(
        403,
        "forbidden_host",
        "Host is not a loopback name: without an API token this server answers only "
        "127.0.0.1, localhost and [::1].",
    )


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


def request_guard(token: str | None) -> Guard:
    """The check every `/api/v2` request passes first: raises ApiError 401 or 403."""
    if token:
        expected = expected_bearer(token)

        def check_token(environ: Mapping[str, Any]) -> None:
            if not bearer_ok(environ.get("HTTP_AUTHORIZATION", ""), expected):
                raise unauthorized()

        return check_token

    def check_host(environ: Mapping[str, Any]) -> None:
        # No Host at all (HTTP/1.0) cannot come from a browser: it reached a loopback socket.
        host = environ.get("HTTP_HOST")
        if host is not None and not is_loopback_host(host):
            raise forbidden_host()

    return check_host
