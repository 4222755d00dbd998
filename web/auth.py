"""Who may use `/api/v2` (docs/security.md), decided from the WSGI environ alone.

With `WORKTRAIN_API_TOKEN`: the request must carry `Authorization: Bearer <token>` (401
`unauthorized`). Without one the server listens on loopback only (daemon/host/bind.py), and a
request whose `Host` is not a loopback name is refused (403 `forbidden_host`): a page on
another site that rebinds its DNS name to 127.0.0.1 still sends its own name as the Host.
`request_guard` is the one check, shared by the Flask app and the steer fast path.

A request that changes state (POST, PATCH, DELETE) must also come from this server's own
pages (docs/security.md), token or not: an `Origin` other than the server's own, or
`Sec-Fetch-Site: cross-site`, is refused (403 `forbidden_origin`), and its body must be
declared JSON (415 `unsupported_media_type`) — a page on another site can send a
`no-cors` POST with a text/plain or form body, never an application/json one without a
CORS preflight (which this server never grants). Both checks run before any body is read.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from daemon.host.bind import is_loopback_host
from web.errors import ApiError
from web.requestbasics import unsupported_media

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


def forbidden_origin() -> ApiError:
    return ApiError(
        403,
        "forbidden_origin",
        "This request comes from a page on another site: state changes are accepted only from "
        "this server's own console, the CLI and other non-browser clients.",
    )


STATE_CHANGING_METHODS = frozenset({"POST", "PATCH", "DELETE", "PUT"})


def is_json_content_type(content_type: str) -> bool:
    """application/json or application/*+json (as Werkzeug's `Request.is_json`)."""
    mimetype = content_type.split(";", 1)[0].strip().lower()
    return mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    )


def check_state_change(environ: Mapping[str, Any]) -> None:
    """For POST, PATCH, DELETE: 403 `forbidden_origin` for a cross-site browser request,
    415 `unsupported_media_type` for a body not declared JSON. Other methods pass."""
    if environ.get("REQUEST_METHOD", "GET") not in STATE_CHANGING_METHODS:
        return
    if environ.get("HTTP_SEC_FETCH_SITE", "").lower() == "cross-site":
        raise forbidden_origin()
    origin = environ.get("HTTP_ORIGIN")
    # A browser names the page's origin; the CLI, curl and MCP send none. `null` (a sandboxed
    # frame, a file:// page) is never this server's own.
    if origin is not None and urlsplit(origin).netloc.lower() != environ.get("HTTP_HOST", "").lower():
        raise forbidden_origin()
    if not is_json_content_type(environ.get("CONTENT_TYPE", "")):
        raise unsupported_media()


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
            check_state_change(environ)
            if not bearer_ok(environ.get("HTTP_AUTHORIZATION", ""), expected):
                raise unauthorized()

        return check_token

    def check_host(environ: Mapping[str, Any]) -> None:
        # No Host at all (HTTP/1.0) cannot come from a browser: it reached a loopback socket.
        host = environ.get("HTTP_HOST")
        if host is not None and not is_loopback_host(host):
            raise forbidden_host()
        check_state_change(environ)

    return check_host
