"""Reading the streams (`wt:events`, `wt:issues`, `wt:signals`, a session's events) by cursor:
the web tier's pages and its SSE follows, the one place their XRANGE, XREAD and XREVRANGE run.

A cursor is a stream entry id Redis accepts as an exclusive start (`valid_stream_id`), or
`""`/`"0"`/`"-"` for the beginning. A cursor Redis refuses anyway is `InvalidCursor`, the
caller's mistake; any other refusal (WRONGTYPE, ...) is the server's and goes up as it is.
"""

from __future__ import annotations

import logging
import re

import redis

from daemon.bus import replies
from daemon.bus.keys import Keys

log = logging.getLogger(__name__)

StreamEntry = tuple[str, dict[str, str]]
# `ms` or `ms-seq`, ASCII digits only (Python's `\d` also matches other scripts' digits,
# which Redis refuses). 20 digits hold 2**64 - 1 and keep int() cheap.
_STREAM_ID_RE = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?", re.ASCII)
MAX_ID_PART = 2**64 - 1
BEGINNING = ("", "0", "-")


class InvalidCursor(ValueError):
    """Redis refused the cursor as a stream id."""


def valid_stream_id(value: str) -> bool:
    """An explicit stream id Redis takes as the point to read after (XRANGE `(id`, XREAD id).

    Each part is an unsigned 64-bit number; the largest id (both parts 2**64 - 1) is refused
    because XRANGE cannot start after it ("invalid start ID for the interval"), and nothing
    can ever follow it anyway.
    """
    match = _STREAM_ID_RE.fullmatch(value)
    if match is None:
        return False
    ms, seq = int(match[1]), int(match[2] or 0)
    return ms <= MAX_ID_PART and seq <= MAX_ID_PART and (ms, seq) != (MAX_ID_PART, MAX_ID_PART)


def valid_cursor(cursor: str) -> bool:
    return cursor in BEGINNING or valid_stream_id(cursor)


class StreamReads:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def after(self, key: str, since: str, count: int) -> list[StreamEntry]:
        """Up to `count` entries after the cursor `since` (InvalidCursor: Redis refused it)."""
        start = "-" if since in BEGINNING else f"({since}"
        try:
            entries: list[StreamEntry] = self.client.xrange(key, min=start, count=count)  # type: ignore[assignment]
        except redis.ResponseError as exc:
            if "ID" not in str(exc):
                raise
            log.info("XRANGE %s refused since=%r: %s", key, since[:64], exc)
            raise InvalidCursor(since) from None
        return entries

    def follow(self, key: str, last: str, count: int, block_ms: int) -> list[StreamEntry]:
        """The entries after `last`, waiting up to `block_ms` for the first (XREAD)."""
        return replies.xread_entries(self.client.xread({key: last}, count=count, block=block_ms))

    def last_id(self, key: str) -> str | None:
        """The id of the stream's newest entry (None: empty or missing)."""
        return replies.last_id(self.client.xrevrange(key, count=1))  # type: ignore[arg-type]
