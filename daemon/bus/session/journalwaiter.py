"""One waiter for every idle session of a worker process: a single XREAD over many journals.

An idle session waits for a steer by blocking on its journal after the cursor its last
`take` returned (README's HTTP API). One blocking read per session would hold one Redis connection
per idle session; instead one thread of the process blocks in a single
`XREAD BLOCK <slice> STREAMS j1 j2 ... c1 c2 ...` over the journals of every session
waiting now, on a connection of its own, and wakes (sets the event of) each session whose
journal got an entry after its cursor. The session then takes its steers itself (fenced).
The read is read-only, so a retry after a lost reply is harmless.

A session that starts waiting while the read blocks on the others is added at once: the
waiter's blocked read is cut short with `CLIENT UNBLOCK` (from the shared client) and sent
again with the new journal. Where that command is refused (an old or a fake Redis), the
new journal joins at the next slice. (Under Redis Cluster the journals would be grouped by
slot, one read per node; WorkTrain runs on one Redis today.)
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from daemon.bus.replies import last_id, xread_streams

log = logging.getLogger(__name__)

SLICE_SECONDS = 1.0  # how long one read blocks (a closed waiter notices within this)
UNBLOCK_TRIES = 50  # a read about to block is retried for this many 2 ms steps


def _stream_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms or 0), int(seq or 0)


@dataclass(eq=False)
class Watch:
    stream: str
    cursor: str
    wake: threading.Event
    fired: bool = False
    generation: int = field(default=0)


class JournalWaiter:
    """Wakes sessions whose journal grows; `client` is the waiter's own (single) connection,
    `control` any client of the process (it sends CLIENT UNBLOCK)."""

    def __init__(
        self, client: redis.Redis, control: redis.Redis, slice_seconds: float = SLICE_SECONDS
    ) -> None:
        self.client = client
        self.control = control
        self.slice_ms = max(int(slice_seconds * 1000), 1)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._watches: set[Watch] = set()
        self._generation = 0
        self._reading: int | None = None  # the generation the blocked read was sent with
        self._read: dict[str, str] = {}  # the journals (and cursors) that read covers
        self._client_id: int | None = None
        self._unblock = True  # False once Redis refused CLIENT UNBLOCK
        self._closed = False
        self._thread: threading.Thread | None = None
        self.round_trips = 0  # for the benchmarks: reads sent

    def wait(self, stream: str, cursor: str, timeout_seconds: float, wake: threading.Event) -> bool:
        """Block until `stream` has an entry after `cursor`, `wake` is set by someone else, or
        the timeout passes; True unless it timed out."""
        watch = Watch(stream, cursor, wake)
        with self._lock:
            self._generation += 1
            watch.generation = self._generation
            self._watches.add(watch)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="steer-waiter", daemon=True)
                self._thread.start()
            self._changed.notify()
        try:
            self._include(watch)
            return wake.wait(max(timeout_seconds, 0.0))
        finally:
            with self._lock:
                self._watches.discard(watch)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._changed.notify()
            thread, client_id, reading = self._thread, self._client_id, self._reading
        if reading is not None and client_id is not None and self._unblock:
            try:
                self.control.client_unblock(client_id)  # no need to wait for the slice's end
            except redis.RedisError as exc:
                log.info("steer waiter: not unblocked at close (%s); it ends with its slice", exc)
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.slice_ms / 1000 + 5)

    def _include(self, watch: Watch) -> None:
        """Cut a blocked read short so it is sent again with this watch's journal."""
        for _ in range(UNBLOCK_TRIES):
            with self._lock:
                reading, client_id = self._reading, self._client_id
                covered = watch.stream in self._read and not (
                    _stream_id(self._read[watch.stream]) > _stream_id(watch.cursor)
                )
            if covered or not self._unblock or client_id is None:
                return  # the read under way wakes this watch too (a wait's next slice, mostly)
            if reading is None or reading >= watch.generation:
                return
            try:
                if self.control.client_unblock(client_id):
                    return
            except redis.ResponseError as exc:
                log.info("steer waiter: CLIENT UNBLOCK refused (%s); new waits join at the next slice", exc)
                self._unblock = False
                return
            except redis.RedisError as exc:
                log.warning("steer waiter: CLIENT UNBLOCK failed: %s", exc)
                return
            time.sleep(0.002)  # the read was not blocking yet: it is about to

    def _snapshot(self) -> tuple[dict[str, str], int] | None:
        """The journals to read and their cursors (the earliest per journal); None when closed."""
        with self._lock:
            while not self._closed and not any(not w.fired for w in self._watches):
                self._changed.wait()
            if self._closed:
                return None
            streams: dict[str, str] = {}
            for watch in self._watches:
                if watch.fired:
                    continue
                known = streams.get(watch.stream)
                if known is None or _stream_id(watch.cursor) < _stream_id(known):
                    streams[watch.stream] = watch.cursor
            self._reading = self._generation
            self._read = streams
            return streams, self._generation

    def _run(self) -> None:
        while True:
            snapshot = self._snapshot()
            if snapshot is None:
                return
            streams, _ = snapshot
            try:
                if self._client_id is None and self._unblock:
                    self._client_id = self._own_id()
                reply = self.client.xread(streams, count=1, block=self.slice_ms)  # type: ignore[arg-type]
                self.round_trips += 1
            except redis.RedisError as exc:  # Redis down or restarting: try again shortly
                log.warning("steer waiter: XREAD failed: %s", exc)
                self._client_id = None  # a new connection has a new id
                time.sleep(0.5)
                continue
            finally:
                with self._lock:
                    self._reading = None
                    self._read = {}
            self._fire(reply)

    def _own_id(self) -> int | None:
        try:
            return int(self.client.client_id())
        except redis.ResponseError as exc:
            log.info("steer waiter: CLIENT ID refused (%s); new waits join at the next slice", exc)
            self._unblock = False
            return None

    def _fire(self, reply: Any) -> None:
        """Wake every watch whose journal now has an entry after its cursor."""
        newest: dict[str, tuple[int, int]] = {}
        for stream, entries in xread_streams(reply):
            last_read = last_id(entries)
            if last_read is not None:
                newest[stream] = _stream_id(last_read)
        if not newest:
            return
        with self._lock:
            for watch in self._watches:
                last = newest.get(watch.stream)
                if not watch.fired and last is not None and last > _stream_id(watch.cursor):
                    watch.fired = True
                    watch.wake.set()
