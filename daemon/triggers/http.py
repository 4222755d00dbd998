"""HTTP to a provider's API (polls, report-back comments): the standard library's http.client.

No redirect is followed (a token goes only where the trigger's `apiUrl` says), every read is
bounded by the timeout, and an answer's body is read up to a cap. A connection refused, a
reset or a timeout is `HttpFailure`: the caller decides whether to try again.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_BODY_BYTES = 16 * 1024 * 1024
USER_AGENT = "WorkTrain-Triggers/1"


class HttpFailure(Exception):
    """No HTTP answer (refused, reset, timed out, a body over the cap)."""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]  # names in lower case (a repeated header: its values joined by ", ")
    body: bytes


def same_origin(url: str, base: str) -> bool:
    """Whether `url` is on `base`'s scheme, host and port (a `Link` must not lead elsewhere)."""
    a, b = urlsplit(url), urlsplit(base)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def request(
    method: str, url: str, headers: dict[str, str], body: bytes | None = None, timeout: float = 10.0
) -> HttpAnswer:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpFailure(f"not an http(s) URL: {url[:200]}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection = kind(parts.hostname, parts.port, timeout=timeout)
    sent = {"User-Agent": USER_AGENT, **headers}
    if body is not None:
        sent.setdefault("Content-Type", "application/json")
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read(MAX_BODY_BYTES + 1)
        if len(data) > MAX_BODY_BYTES:
            raise HttpFailure(f"answer larger than {MAX_BODY_BYTES} bytes")
        answered: dict[str, str] = {}
        for name, value in response.getheaders():
            key = name.lower()
            answered[key] = f"{answered[key]}, {value}" if key in answered else value
        return HttpAnswer(response.status, answered, data)
    except TimeoutError as exc:
        raise HttpFailure(f"timeout after {timeout:g} s: {exc}"[:300]) from None
    except (OSError, http.client.HTTPException) as exc:
        raise HttpFailure(f"{type(exc).__name__}: {exc}"[:300]) from None
    finally:
        connection.close()
