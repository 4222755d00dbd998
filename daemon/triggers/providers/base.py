"""What every provider adapter speaks: the Provider protocol, a poll's listing, a rate limit,
and the `Link` header. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from daemon.schema.records import TriggerItem
from daemon.triggers.events import TriggerEvent

Headers = Mapping[str, str]  # names in lower case


@dataclass(frozen=True)
class Listing:
    """The first page of what one poll reads."""

    kind: str  # the poll's event: issues, pull_request, merge_request
    url: str
    newest_first: bool  # True: not filtered by the cursor server-side; read until older items


@dataclass(frozen=True)
class RateLimit:
    remaining: int | None = None
    limit: int | None = None
    reset_ms: int | None = None  # when the budget is whole again
    retry_after_ms: int | None = None  # a 429's or a secondary limit's Retry-After


class Provider(Protocol):
    name: str

    def verify(self, secret: str, headers: Headers, body: bytes) -> bool: ...

    def webhook_event(self, headers: Headers, body: bytes) -> TriggerEvent: ...

    def describe(self, event: TriggerEvent) -> str: ...

    def comments_url(self, api_url: str, item: TriggerItem) -> str | None: ...

    def auth_headers(self, token: str) -> dict[str, str]: ...

    def listing(
        self, api_url: str, repo: str, kind: str, cursor: str | None, labels: list[str]
    ) -> Listing: ...

    def next_page(self, headers: Headers, url: str) -> str | None: ...

    def rate_limit(self, headers: Headers, now_ms: int) -> RateLimit: ...

    def polled_event(self, kind: str, item: Any, repo: str) -> TriggerEvent | None: ...

    def comments_since_url(self, comments_url: str, since: str) -> str: ...

    def comment_text(self, comment: Any) -> str: ...


_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]+)*)")
_REL = re.compile(r'rel\s*=\s*"?([^";]+)"?')


def parse_link(header: str | None) -> dict[str, str]:
    """RFC 8288 `Link: <url>; rel="next", <url>; rel="last"` as {rel: url}."""
    found: dict[str, str] = {}
    for match in _LINK.finditer(header or ""):
        rel = _REL.search(match.group(2))
        if rel:
            for name in rel.group(1).split():
                found.setdefault(name, match.group(1))
    return found


def int_header(headers: Headers, name: str) -> int | None:
    value = headers.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def rate_limit_headers(headers: Headers, now_ms: int, prefix: str) -> RateLimit:
    """`<prefix>remaining`, `<prefix>limit`, `<prefix>reset` (epoch seconds) and `Retry-After`:
    GitHub's `x-ratelimit-*` and GitLab's `ratelimit-*` are the same four headers."""
    reset = int_header(headers, f"{prefix}reset")
    retry = int_header(headers, "retry-after")
    return RateLimit(
        remaining=int_header(headers, f"{prefix}remaining"),
        limit=int_header(headers, f"{prefix}limit"),
        reset_ms=reset * 1000 if reset is not None else None,
        retry_after_ms=now_ms + retry * 1000 if retry is not None else None,
    )
