"""Coordinator signals (README's Sub-agents and questions): the agent's voice, as streams a coordinator
can wait on.

`signal_coordinator` appends `{offset, kind, summary, data?, turnId, ts, sessionId, wait}`
to the session's stream `wt:session:{id}:signals` — one fenced script (signal.lua) that also
numbers it: a stale attempt's signal is refused like its other writes — then to the global
`wt:signals` (trimmed `MAXLEN ~`) and to the JSONL mirror `<data>/signals/<sessionId>.jsonl`.
The two later writes are fire-and-forget: a failing sink is logged, the signal stands.

Readers: `page` (a session's signals after an offset), `wait` (the same, and when there is
none yet, an XREAD BLOCK on the session's stream after the page's last entry: it wakes the
moment a signal lands, never polls), `global_page` (the global stream by entry id).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from daemon.bus.keys import Keys
from daemon.bus.replies import last_entry, last_id, xread_streams
from daemon.bus.scripts import SIGNAL
from daemon.bus.session.steerbus import SessionChannel
from daemon.bus.streams.eventsink import STREAM_FIELD, append_jsonl
from daemon.schema.signals import Signal

log = logging.getLogger(__name__)

SESSION_STREAM_MAXLEN = 10_000
GLOBAL_STREAM_MAXLEN = 100_000
MAX_WAIT_SECONDS = 60.0
BLOCK_SLICE_MS = 1000  # a long poll blocks in slices of this (a web worker stopping is noticed)


def signal_jsonl_path(data_dir: Path, session_id: str) -> Path:
    return data_dir / "signals" / f"{session_id}.jsonl"


@dataclass(frozen=True, slots=True)
class SignalPage:
    signals: list[Signal]
    next: int  # the offset to pass as `since` to read on


class SignalStream:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        data_dir: Path | None = None,
        retention_seconds: int = 7 * 86400,
    ) -> None:
        self.client = client
        self.keys = keys
        self.data_dir = data_dir
        # a session's stream outlives it by the retention period (its other keys' lifetime)
        self.stream_ttl = retention_seconds * 2

    # --- the worker side --------------------------------------------------------------

    def append(self, channel: SessionChannel, signal: Signal) -> Signal:
        """The fenced append (raises daemon.bus.session.fencing.Fenced for a stale attempt), then the
        global stream and the mirror. Returns the signal with its offset."""
        channel.guard()
        body = signal.model_dump_json(exclude={"offset"})
        stored_as = channel.call(  # fenced, and confirmed on the replicas like every worker-side change
            SIGNAL,
            body,
            SESSION_STREAM_MAXLEN,
            self.stream_ttl,
            extra_keys=(self.keys.signals_of(signal.sessionId),),
        )
        stored = signal.model_copy(update={"offset": stored_as.offset})
        line = stored.model_dump_json()
        try:
            fields = {STREAM_FIELD: line, "sessionId": stored.sessionId, "kind": stored.kind}
            self.client.xadd(self.keys.signals, fields, maxlen=GLOBAL_STREAM_MAXLEN, approximate=True)  # type: ignore[arg-type]
        except redis.RedisError as exc:
            log.warning("signal not written to %s (%s): %s", self.keys.signals, exc, line[:300])
        if self.data_dir is not None:
            path = signal_jsonl_path(self.data_dir, stored.sessionId)
            try:
                append_jsonl(path, [line])
            except OSError as exc:
                log.warning("signal not written to %s (%s): %s", path, exc, line[:300])
        return stored

    # --- the readers --------------------------------------------------------------------

    def _entries(self, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        entries: Any = self.client.xrange(self.keys.signals_of(session_id))
        return list(entries)

    def page(self, session_id: str, since: int = 0, limit: int = 100) -> tuple[SignalPage, str]:
        """Signals with an offset above `since`, at most `limit`; and the stream id to block
        after for the next one."""
        entries = self._entries(session_id)
        signals = [parse_entry(fields) for _, fields in entries]
        chosen = [s for s in signals if s.offset > since][:limit]
        cursor = last_id(entries) or "0-0"
        return SignalPage(chosen, chosen[-1].offset if chosen else since), cursor

    def wait(
        self, session_id: str, since: int, limit: int, seconds: float, monotonic: Callable[[], float]
    ) -> SignalPage:
        """The page; when it is empty, the first signals that land within `seconds` (<= 60).
        The block also watches the session's event stream (same hash slot), so the wait
        ends, empty, as soon as the session does: no more signal can come."""
        page, cursor = self.page(session_id, since, limit)
        deadline = monotonic() + min(max(seconds, 0.0), MAX_WAIT_SECONDS)
        key, events = self.keys.signals_of(session_id), self.keys.session(session_id).events
        last_event: Any = self.client.xrevrange(events, count=1)
        event_cursor = last_id(last_event) or "0-0"
        while not page.signals:
            remaining = deadline - monotonic()
            if remaining <= 0:
                break
            block = max(min(int(remaining * 1000), BLOCK_SLICE_MS), 1)  # 0 would block forever
            reply: Any = self.client.xread({key: cursor, events: event_cursor}, count=limit, block=block)
            ended = False
            for stream, entries in xread_streams(reply):
                if stream == events:
                    event_cursor = last_id(entries) or event_cursor
                    ended = ended or any(ends_session(fields) for _, fields in entries)
                    continue
                cursor = last_id(entries) or cursor
                fresh = [s for s in (parse_entry(fields) for _, fields in entries) if s.offset > since]
                page = SignalPage(fresh[:limit], fresh[:limit][-1].offset if fresh else since)
            if ended and not page.signals:
                break
        return page

    def last_question(self, session_id: str) -> Signal | None:
        """The session's newest signal if it waits for a reply (the console's banner)."""
        entries: Any = self.client.xrevrange(self.keys.signals_of(session_id), count=1)
        newest = last_entry(entries)
        if newest is None:
            return None
        _, fields = newest
        signal = parse_entry(fields)
        return signal if signal.wait else None


def parse_entry(fields: dict[str, Any]) -> Signal:
    """A stream entry (of a `decode_responses=True` client) as a Signal."""
    raw = json.loads(fields.get(STREAM_FIELD) or "{}")
    return Signal.model_validate({**raw, "offset": int(fields.get("offset") or raw.get("offset") or 0)})


def ends_session(fields: dict[str, Any]) -> bool:
    """Whether an event stream entry is the session's `session_completed`."""
    try:
        return bool(json.loads(fields.get(STREAM_FIELD) or "{}").get("kind") == "session_completed")
    except ValueError:
        return False
