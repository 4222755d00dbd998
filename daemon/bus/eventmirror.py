"""Off-request-path copies of `steer_accepted` into the global stream and the JSONL mirror.

accept.lua already writes `steer_accepted` into the session's own event stream (same hash
slot, same round trip). The global stream `wt:events` lives in another slot, and the JSONL
mirror is a file, so neither can join the script; doing them on the request path would
double its Redis round trips. Instead the route appends the event to this mirror's deque;
one daemon thread per process wakes every `LINGER_SECONDS`, takes everything waiting, and
writes it with one pipelined XADD batch and one JSONL append. Lingering (rather than waking
per event) is what makes it cheap: under load one round trip and one file write carry
hundreds of events, instead of one each (measured: docs/benchmarks.md).

Never blocking and never failing the request: `submit` is a `deque.append` (atomic, no
lock, no thread wake-up); past `MAX_QUEUED` waiting events (Redis or the disk far behind)
new ones are dropped with a warning. The thread logs and moves on when a sink fails.
Fork-safe: the thread is started lazily by the first `submit` in a process, and a process
that finds it was forked (a gunicorn worker forked from a master that had already
submitted) starts its own deque and thread.

Consequences: in `wt:events` a `steer_accepted` lands up to `LINGER_SECONDS` after the
acceptance, so it can follow events that happened after it; and a web process killed
without a clean exit (SIGKILL, or a server that ends its workers with `os._exit`) loses the
copies of its last linger window from `wt:events` and the JSONL file. The session's own
stream (what SSE reads) and the steer journal are written by accept.lua itself: exact and
never lost.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from pathlib import Path

import redis

from daemon.bus.events import EventBase, EventSink
from daemon.bus.keys import Keys

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
        self._pending: deque[EventBase] = deque()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self.dropped = 0

    def submit(self, event: EventBase) -> None:
        """Queue one event; returns at once and never raises."""
        if self._pid != os.getpid():
            self._start()
        if len(self._pending) >= MAX_QUEUED:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("event mirror far behind: %d event(s) dropped so far", self.dropped)
            return
        self._idle.clear()
        self._pending.append(event)

    def flush(self, timeout: float = 5.0) -> bool:
        """Write everything submitted so far now (tests, shutdown). True when drained in time."""
        if self._pid != os.getpid():
            return True
        deadline = time.monotonic() + timeout
        while self._pending or not self._idle.is_set():
            if time.monotonic() >= deadline:
                return False
            self._wake.set()
            if self._idle.wait(max(deadline - time.monotonic(), 0)) and self._pending:
                time.sleep(0.001)  # an event arrived while the thread went idle: it is awake again
        return True

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            # First use in this process, or first after a fork: the parent's thread does not
            # exist here, and its deque may hold the parent's events (written by the parent).
            self._pending = deque()
            self._wake = threading.Event()
            self._idle = threading.Event()
            self._idle.set()
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
                batch: list[EventBase] = []
                while pending and len(batch) < MAX_BATCH:
                    batch.append(pending.popleft())
                try:
                    # the session's own stream already has it (accept.lua): only wt:events
                    self.sink.write(batch, session_streams=False)
                except Exception:  # the thread must outlive any bug in one batch
                    log.exception("event mirror failed on a batch of %d", len(batch))
            if not pending:
                self._idle.set()
