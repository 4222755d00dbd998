"""One writer per worker process for the events its attempts queue (daemon/bus/session/attemptevents.py).

An attempt's events ride with its next worker-side script, in the same round trip. When none
comes soon — the loop waits on the model (`turn_started`, a receipt), on a tool
(`tool_call_started`), on a steer (an idle turn's `turn_ended`) — this process's one thread,
every `LINGER_SECONDS`, sends what every attempt of the process has queued in ONE pipelined
round trip (an `emit.lua` per session: each fenced for its own attempt, each reply read by
that attempt), as `LeaseBeats` does for the leases. So an event reaches its session's stream
within the linger, and a turn costs its session no emit round trip of its own.

Order: an attempt's events are sent by one thread at a time (its `sending` lock), in the order
they were queued; the writer only takes an attempt whose lock is free, and comes back to the
others at its next round. An attempt past its lease's trust window is left to its own thread
(whose guard asks Redis first: docs/durability.md); a refused one's events are dropped. A failed
round trip is logged and its events are lost, as a failed event write always was (events are a
log; the journal is the record of delivery).
"""

from __future__ import annotations

import logging
import threading
from collections import deque

import redis

from daemon.bus.scriptpipe import ScriptCall, run_calls
from daemon.bus.session.attemptevents import AttemptEvents, EventBatch, replicated

log = logging.getLogger(__name__)

LINGER_SECONDS = 0.05


class EventWriter:
    """The process's writer of queued attempt events, on one client."""

    def __init__(self, client: redis.Redis, linger_seconds: float = LINGER_SECONDS) -> None:
        self.client = client
        self.linger = linger_seconds
        self._due: deque[AttemptEvents] = deque()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def notice(self, attempt: AttemptEvents) -> None:
        """`attempt` has queued events: they go at the next round (or with its next script)."""
        self._due.append(attempt)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="event-writer", daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.linger + 5)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.linger)
            self._wake.clear()
            try:
                self.write_once()
            except Exception:  # the thread must outlive any bug in one round
                log.exception("event writer round failed")

    def write_once(self) -> int:
        """Send what the noticed attempts queued, in one round trip; returns how many batches."""
        taken: list[tuple[AttemptEvents, list[EventBatch]]] = []
        later: list[AttemptEvents] = []
        try:
            for attempt in self._noticed():
                if not attempt.sending.acquire(blocking=False):
                    if attempt.queued:  # its own thread is sending: look again next round
                        later.append(attempt)
                    continue
                batches = self._ready(attempt, later)
                if batches:
                    taken.append((attempt, batches))
                else:
                    attempt.sending.release()
            if taken:
                self._send(taken)
        finally:
            for attempt, _ in taken:
                attempt.sending.release()
            self._due.extend(later)
        return sum(len(batches) for _, batches in taken)

    def _noticed(self) -> list[AttemptEvents]:
        seen: dict[int, AttemptEvents] = {}
        while self._due:
            attempt = self._due.popleft()
            seen.setdefault(id(attempt), attempt)
        return list(seen.values())

    @staticmethod
    def _ready(attempt: AttemptEvents, later: list[AttemptEvents]) -> list[EventBatch]:
        """What `attempt` has queued, if the writer may send it now."""
        fence = attempt.channel.fence
        if fence is None or fence.refused is not None:
            dropped = attempt.discard()
            if dropped:
                log.info(
                    "session %s: %d event(s) of a refused attempt dropped",
                    attempt.channel.session_id,
                    dropped,
                )
            return []
        if not fence.trusted:  # its own thread's guard asks Redis first; its next script carries them
            if attempt.queued:
                later.append(attempt)
            return []
        return attempt.take()

    def _send(self, taken: list[tuple[AttemptEvents, list[EventBatch]]]) -> None:
        calls: list[ScriptCall] = []
        for attempt, batches in taken:
            calls.extend(attempt.calls(batches))
        first = next(attempt for attempt, _ in taken).channel
        sent_at = {id(attempt): attempt.channel.fence.now() for attempt, _ in taken if attempt.channel.fence}
        try:
            answers = iter(replicated(first, lambda: run_calls(self.client, first.bus.scripts, calls)))
        except redis.RedisError as exc:
            lines = sum(len(batch.lines) for _, batches in taken for batch in batches)
            log.warning("%d event(s) of %d session(s) not written: %s", lines, len(taken), exc)
            return
        for attempt, batches in taken:
            attempt.answered(batches, [next(answers) for _ in batches], sent_at.get(id(attempt), 0.0))
