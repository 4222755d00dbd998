"""Pages of the global streams (`wt:events`, `wt:issues`) for GET /api/v2/events and /issues.

Two sources behind one protocol: Redis streams (normal mode), and the JSONL mirrors
(standalone mode, web/standalone.py). A page is `{"<items>": [...], "next": cursor}`: each
item is the stored JSON object plus `id`, its cursor; pass `next` back as `?since=` to read
on. With Redis a cursor is the stream entry id, so `since` may also be any stream id that
Redis accepts as an exclusive start (`valid_stream_id`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from daemon.bus.keys import Keys
from daemon.bus.streams.eventsink import STREAM_FIELD
from daemon.bus.streams.reads import InvalidCursor, StreamEntry, StreamReads, valid_cursor
from web.errors import invalid_request

log = logging.getLogger(__name__)

SCAN_CHUNK = 500
MAX_SCANNED = 10_000  # per request, when filtering the global issue stream by session


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    next: str


class EventReader(Protocol):
    def events_page(self, session_id: str | None, since: str, limit: int) -> Page: ...

    def issues_page(self, session_id: str | None, since: str, limit: int) -> Page: ...

    def valid_cursor(self, cursor: str) -> bool: ...


def decode_entry(entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """A stream entry as a JSON object: its `data` field parsed, else its fields as they are."""
    raw = fields.get(STREAM_FIELD)
    if raw is None:
        return {"id": entry_id, **fields}
    try:
        value = json.loads(raw)
    except ValueError:
        log.warning("stream entry %s holds invalid JSON; served as text", entry_id)
        return {"id": entry_id, STREAM_FIELD: raw}
    if not isinstance(value, dict):
        return {"id": entry_id, STREAM_FIELD: value}
    return {"id": entry_id, **value}


class RedisReader:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.reads = StreamReads(client, keys)
        self.keys = keys

    def valid_cursor(self, cursor: str) -> bool:
        return valid_cursor(cursor)

    def _after(self, key: str, since: str, count: int) -> list[StreamEntry]:
        try:
            return self.reads.after(key, since, count)
        except InvalidCursor:  # a backstop behind valid_cursor: the caller's mistake
            raise invalid_request("since must be a cursor returned as `next` (or a stream id).") from None

    def events_page(self, session_id: str | None, since: str, limit: int) -> Page:
        """`wt:events`, or with a session id that session's own stream (exact, and cheap)."""
        key = self.keys.events if session_id is None else self.keys.session(session_id).events
        entries = self._after(key, since, limit)
        items = [decode_entry(eid, fields) for eid, fields in entries]
        return Page(items, entries[-1][0] if entries else since)

    def issues_page(self, session_id: str | None, since: str, limit: int) -> Page:
        if session_id is None:
            entries = self._after(self.keys.issues, since, limit)
            return Page([decode_entry(eid, f) for eid, f in entries], entries[-1][0] if entries else since)
        # The issue stream is global: scan it in chunks, keep this session's entries (told by
        # the entry's own `sessionId` field, so only those are parsed). The cursor is the
        # last entry looked at, so a follow-up request never rescans.
        items: list[dict[str, Any]] = []
        cursor, scanned = since, 0
        while len(items) < limit and scanned < MAX_SCANNED:
            entries = self._after(self.keys.issues, cursor, SCAN_CHUNK)
            for eid, fields in entries:
                cursor = eid
                if fields.get("sessionId") == session_id:
                    items.append(decode_entry(eid, fields))
                    if len(items) == limit:
                        break
            scanned += len(entries)
            if len(entries) < SCAN_CHUNK:
                break
        return Page(items, cursor)


def signals_page(reader: RedisReader, since: str, limit: int) -> Page:
    """A page of `wt:signals` (README's Sub-agents and questions), every session's coordinator signals."""
    entries = reader._after(reader.keys.signals, since, limit)
    return Page([decode_entry(eid, fields) for eid, fields in entries], entries[-1][0] if entries else since)
