"""The event sink: each event to the global stream `wt:events` (trimmed `MAXLEN ~`), to its
session's own stream, and to `<data>/events/YYYY-MM-DD.jsonl`. Emitting never fails the
caller: a sink that fails is logged and the others still land. (The events themselves:
daemon/schema/events.py.)"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import redis

from daemon.bus.keys import Keys
from daemon.host.private import open_private
from daemon.schema.events import EventBase

log = logging.getLogger(__name__)

GLOBAL_STREAM_MAXLEN = 100_000
STREAM_FIELD = "data"


def events_jsonl_path(data_dir: Path, day: str) -> Path:
    """The JSONL mirror of one UTC day (`YYYY-MM-DD`) of events; `*` as `day` globs them all."""
    return data_dir / "events" / f"{day}.jsonl"


def append_jsonl(path: Path, lines: Iterable[str]) -> None:
    """Append whole lines under an exclusive lock, in one write: lines never interleave."""
    payload = "".join(line + "\n" for line in lines).encode()
    if not payload:
        return
    fd = open_private(path, os.O_WRONLY | os.O_APPEND)  # steer texts and goals: owner-only
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, payload)
    finally:
        os.close(fd)  # closing releases the lock


class WebhookQueue(Protocol):
    """What queues an event batch's webhooks with it (daemon.bus.outbox.webhooks.WebhookOutbox)."""

    def queue_for(self, session_id: str, events: Sequence[EventBase]) -> tuple[str, tuple[str, ...]]:
        """emit.lua's ARGV[4] and its KEYS[9..] for these events ('' and () for none)."""
        ...

    def queue_now(self, session_id: str, events: Sequence[EventBase]) -> int:
        """Queue these events' webhooks at once (events recorded without emit.lua)."""
        ...


class EventSink:
    """Writes events to the streams and the daily JSONL mirror; never raises. `webhooks`:
    a running attempt's webhook-bearing events queue their POSTs with them (emit.lua)."""

    def __init__(
        self,
        client: redis.Redis | None,
        keys: Keys,
        data_dir: Path | None,
        webhooks: WebhookQueue | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.data_dir = data_dir
        self.webhooks = webhooks

    def emit(self, *events: EventBase) -> None:
        self.write(events)

    def write(self, events: Sequence[EventBase], *, session_streams: bool = True) -> None:
        """Both streams (or, with `session_streams=False`, only `wt:events`) in one pipeline,
        then the JSONL mirror. A sink that fails is logged; the other still lands."""
        if not events:
            return
        lines: list[str] = []
        if self.client is not None:
            try:
                pipe = self.client.pipeline(transaction=False)
                lines = self.stage(pipe, events, session_streams=session_streams)
                pipe.execute()
            except redis.RedisError as exc:
                log.warning("%d event(s) not written to Redis: %s", len(events), exc)
        self.mirror(lines or [event.model_dump_json() for event in events])

    def write_lines(self, lines: Sequence[str]) -> None:
        """Events already in their session's stream, as JSON lines: `wt:events` (one
        pipeline) and the JSONL mirror."""
        if not lines:
            return
        if self.client is not None:
            try:
                pipe = self.client.pipeline(transaction=False)
                for line in lines:
                    pipe.xadd(
                        self.keys.events, {STREAM_FIELD: line}, maxlen=GLOBAL_STREAM_MAXLEN, approximate=True
                    )
                pipe.execute()
            except redis.RedisError as exc:
                log.warning("%d event(s) not written to Redis: %s", len(lines), exc)
        self.mirror(lines)

    def stage(
        self, pipe: redis.client.Pipeline, events: Sequence[EventBase], *, session_streams: bool = True
    ) -> list[str]:
        """Add the stream writes of `events` to a caller's pipeline (or MULTI); returns their
        JSON lines for `mirror` once the pipeline has run."""
        lines = [event.model_dump_json() for event in events]
        for event, line in zip(events, lines, strict=True):
            pipe.xadd(self.keys.events, {STREAM_FIELD: line}, maxlen=GLOBAL_STREAM_MAXLEN, approximate=True)
            if session_streams:
                pipe.xadd(self.keys.session(event.sessionId).events, {STREAM_FIELD: line})
        return lines

    def mirror(self, lines: Sequence[str]) -> None:
        """Append to today's `<data>/events/YYYY-MM-DD.jsonl`."""
        if self.data_dir is None or not lines:
            return
        try:
            append_jsonl(events_jsonl_path(self.data_dir, datetime.now(UTC).strftime("%Y-%m-%d")), lines)
        except OSError as exc:
            log.warning("%d event(s) not written to the JSONL mirror: %s", len(lines), exc)
