"""Off-the-hot-path copies of events into the global stream and the JSONL mirror, per process.

The session's own event stream is written where the event happens (the web's accept.lua for
`steer_accepted`; a worker's fenced `emit.lua` for a session's events: daemon/bus/session/attemptevents.py).
The global stream `wt:events` lives in another slot, and the JSONL mirror is a file, so
neither can join the script; doing them on the caller's path would double its Redis round
trips and take the JSONL file's lock, which every process of the host shares. Instead the
caller appends the event to this mirror's deque; one daemon thread per process wakes every
`LINGER_SECONDS`, takes everything waiting, and writes it with one pipelined XADD batch and
one JSONL append. Lingering (rather than waking per event) is what makes it cheap: under
load one round trip and one file write carry hundreds of events, instead of one each
(measured: docs/benchmarks.md, sections 1 and 13).

Why the worker needs it (issue 32): with each session thread appending its own events to
the JSONL file under `flock`, the 1,000 sessions of 8 worker processes queued on that one
lock — a holder must also win its process's GIL to write and let go — and session threads
spent a third of their wall time waiting there (py-spy `--idle`, docs/benchmarks.md section 13).

Never blocking and never failing the request: `submit` is a `deque.append` (atomic, no
lock, no thread wake-up); past `MAX_QUEUED` waiting events (Redis or the disk far behind)
new ones are dropped with a warning. The thread logs and moves on when a sink fails.
Fork-safe: the thread is started lazily by the first `submit` in a process, and a process
that finds it was forked (a gunicorn worker forked from a master that had already
submitted) starts its own deque and thread.

Consequences: in `wt:events` an event lands up to `LINGER_SECONDS` after it happened, so
it can follow events of other processes that happened after it (one session's events keep
their order: one process, one deque); and a process killed without a clean exit (SIGKILL,
or a server that ends its workers with `os._exit`) loses the copies of its last linger
window from `wt:events` and the JSONL file. The session's own stream (what SSE reads and
what a resuming attempt checks its receipts against) and the steer journal are written by
the scripts themselves: exact and never lost. A worker flushes its mirror when a session's
job ends, so a finished job's events are all in the mirror.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import redis

from daemon.bus.keys import Keys
from daemon.bus.streams.eventsink import EventSink, WebhookQueue
from daemon.schema.events import EventBase

log = logging.getLogger(__name__)

MAX_QUEUED = 100_000
MAX_BATCH = 1000
LINGER_SECONDS = 0.05


class EventMirror:
    """Writes events to `wt:events` and `<data>/events/YYYY-MM-DD.jsonl` from a background thread."""

    def __init__(
        self,
        client: redis.Redis | None,
        keys: Keys,
        data_dir: Path | None,
        linger_seconds: float = LINGER_SECONDS,
    ) -> None:
        self.sink = EventSink(client, keys, data_dir)
        self.linger_seconds = linger_seconds
        self._lock = threading.Lock()
        self._pid = -1
        # events, event JSON lines (an attempt's, already in their session's stream), flush markers
        self._pending: deque[EventBase | str | threading.Event] = deque()
        self._wake = threading.Event()
        self.dropped = 0

    def submit(self, event: EventBase | str) -> None:
        """Queue one event (or its JSON line); returns at once and never raises."""
        if self._pid != os.getpid():
            self._start()
        if len(self._pending) >= MAX_QUEUED:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("event mirror far behind: %d event(s) dropped so far", self.dropped)
            return
        self._pending.append(event)

    def flush(self, timeout: float = 5.0) -> bool:
        """Write everything submitted before this call now (tests, a job's end, shutdown);
        True when written in time. What other threads submit meanwhile is not waited for: a
        marker goes in line behind what is queued, and the thread sets it once that is written."""
        if self._pid != os.getpid():
            return True
        written = threading.Event()
        self._pending.append(written)
        self._wake.set()
        return written.wait(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            # First use in this process, or first after a fork: the parent's thread does not
            # exist here, and its deque may hold the parent's events (written by the parent).
            self._pending = deque()
            self._wake = threading.Event()
            try:
                threading.Thread(target=self._run, name="worktrain-event-mirror", daemon=True).start()
            except RuntimeError:  # "can't start new thread": logged, the request goes on
                log.exception("event mirror thread could not start; events are not mirrored")
                return
            self._pid = os.getpid()
            atexit.register(self.flush, 2.0)

    def _run(self) -> None:
        pending = self._pending
        while True:
            self._wake.wait(self.linger_seconds)
            self._wake.clear()
            while pending:
                lines: list[str] = []
                markers: list[threading.Event] = []
                while pending and len(lines) < MAX_BATCH:
                    item = pending.popleft()
                    if isinstance(item, threading.Event):
                        markers.append(item)
                    else:
                        lines.append(item if isinstance(item, str) else item.model_dump_json())
                try:
                    # the session's own stream already has it (its script): only wt:events
                    self.sink.write_lines(lines)
                except Exception:  # the thread must outlive any bug in one batch
                    log.exception("event mirror failed on a batch of %d", len(lines))
                for marker in markers:
                    marker.set()


class MirroredSink(EventSink):
    """An EventSink whose global-stream and JSONL copies go through `mirror` (a worker's
    sessions: `AttemptEvents` writes the session stream with emit.lua, then calls
    `write(..., session_streams=False)`); a write that includes the session streams stays
    synchronous."""

    def __init__(self, mirror: EventMirror, webhooks: WebhookQueue | None = None) -> None:
        super().__init__(mirror.sink.client, mirror.sink.keys, mirror.sink.data_dir, webhooks)
        self.event_mirror = mirror

    def write(self, events: Sequence[EventBase], *, session_streams: bool = True) -> None:
        if session_streams:
            super().write(events, session_streams=True)
            return
        for event in events:
            self.event_mirror.submit(event)

    def write_lines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.event_mirror.submit(line)
