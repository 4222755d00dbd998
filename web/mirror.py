"""Off-request-path copies of `steer_accepted` into the global stream and the JSONL mirror.

accept.lua already writes `steer_accepted` into the session's own event stream (same hash
slot, same round trip). The global stream `wt:events` lives in another slot, and the JSONL
mirror is a file, so neither can join the script; doing them on the request path would
double its Redis round trips. Instead the route hands the event to this mirror: a queue
drained by one daemon thread per process, which batches the XADDs of everything waiting
into one pipeline and appends the JSONL lines in one write.

Never blocking and never failing the request: `submit` is a non-blocking put on a bounded
queue (a full queue drops the event with a warning: Redis or the disk is far behind), and
the thread logs and moves on when a sink fails. Fork-safe: the thread is started lazily by
the first `submit` in a process, and a process that finds it was forked (a gunicorn worker
forked from a master that had already submitted) starts its own queue and thread.

Consequence, documented in docs/redis.md's terms: in `wt:events` a `steer_accepted` may land
a few milliseconds after the acceptance, so it can follow events that happened after it.
The session's own stream (what SSE reads) is exact.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import redis

from daemon.events import GLOBAL_STREAM_MAXLEN, STREAM_FIELD, EventBase, append_jsonl
from daemon.keys import Keys

log = logging.getLogger(__name__)

MAX_QUEUED = 50_000
MAX_BATCH = 500


class EventMirror:
    """Writes events to `wt:events` and `<data>/events/YYYY-MM-DD.jsonl` from a background thread."""

    def __init__(self, client: redis.Redis | None, keys: Keys, data_dir: Path | None) -> None:
        self.client = client
        self.keys = keys
        self.data_dir = data_dir
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: queue.Queue[str] = queue.Queue(MAX_QUEUED)
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def submit(self, event: EventBase) -> None:
        """Queue one event; returns at once and never raises."""
        try:
            self._ensure_thread()
            self._queue.put_nowait(event.model_dump_json())
        except queue.Full:
            self.dropped += 1
            log.warning("event mirror queue full; dropped %s", event.model_dump_json()[:300])
        except RuntimeError:  # "can't start new thread": resource exhaustion, logged not raised
            log.exception("event mirror thread could not start")

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every submitted event was written (tests, shutdown). True when drained."""
        if self._pid != os.getpid():
            return True
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            # First use in this process (or first after a fork: the parent's thread does not
            # exist here, and its queue's locks may have been copied mid-use).
            self._queue = queue.Queue(MAX_QUEUED)
            self._thread = threading.Thread(target=self._run, name="worktrain-event-mirror", daemon=True)
            self._thread.start()
            self._pid = os.getpid()
            atexit.register(self.flush, 2.0)

    def _run(self) -> None:
        q = self._queue
        while True:
            batch = [q.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(q.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(batch)
            except Exception:  # the thread must outlive any bug in one batch
                log.exception("event mirror failed on a batch of %d", len(batch))
            finally:
                for _ in batch:
                    q.task_done()

    def _write(self, lines: list[str]) -> None:
        if self.client is not None and lines:
            try:
                pipe = self.client.pipeline(transaction=False)
                for line in lines:
                    pipe.xadd(
                        self.keys.events, {STREAM_FIELD: line}, maxlen=GLOBAL_STREAM_MAXLEN, approximate=True
                    )
                pipe.execute()
            except redis.RedisError as exc:
                log.warning("%d event(s) not mirrored to %s: %s", len(lines), self.keys.events, exc)
        if self.data_dir is not None and lines:
            day = datetime.now(UTC).strftime("%Y-%m-%d")
            try:
                append_jsonl(self.data_dir / "events" / f"{day}.jsonl", lines)
            except OSError as exc:
                log.warning("%d event(s) not mirrored to the JSONL file: %s", len(lines), exc)
