"""Threads for interruptible calls, kept and reused instead of started one per call.

`TurnInterrupt.abandonable` runs a model call off the session's thread so that an interrupt
can walk away from it (daemon/turn/interrupt.py). Starting a thread per call was measured to
cost more than it looks (issue 32): `Thread.start` waits until the new thread has run, so
with 125 sessions in one process it queued for the GIL behind every other runnable thread,
and py-spy `--gil` found it in 21 % of a busy worker's GIL samples at 1,000 sessions
(docs/benchmarks.md section 13). Here a call goes to an idle thread of the process if there
is one and starts a new one only if there is none; a thread that has been idle for
`IDLE_SECONDS` ends, so the pool follows the number of calls in flight.

The threads are daemon threads, as the per-call ones were: a process that exits (a cold
shutdown) does not wait for a call in flight. An abandoned call keeps its thread until it
stops on its own (its stream was closed), then the thread is idle again.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

IDLE_SECONDS = 60.0  # an idle thread ends after this long without a call


class _Worker:
    """One kept thread: runs the calls handed to it, one at a time."""

    def __init__(self, pool: CallThreads) -> None:
        self.pool = pool
        self.ready = threading.Condition(threading.Lock())
        self.task: Callable[[], None] | None = None

    def run(self) -> None:
        while True:
            with self.ready:
                if self.task is None and not self.ready.wait_for(lambda: self.task is not None, IDLE_SECONDS):
                    if self.pool.retire(self):
                        return
                    continue  # handed a call as it timed out: run it
                task, self.task = self.task, None
            try:
                task()  # type: ignore[misc]
            except BaseException:  # a call's own errors are its caller's (abandonable hands them over)
                log.exception("a call thread's task raised")
            self.pool.idle(self)


class CallThreads:
    """A process's kept threads for interruptible calls (`run` hands one a call)."""

    def __init__(self, name: str = "call") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self.started = 0  # threads ever started (tests, benchmarks)
        self.busy = 0  # calls running now, abandoned ones included

    def run(self, task: Callable[[], None]) -> None:
        """Run `task` in a thread of the pool; returns at once. `task` must not raise (the
        caller's wrapper records its outcome)."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            self.busy += 1
        if worker is None:
            worker = _Worker(self)
            worker.task = task
            self.started += 1
            threading.Thread(target=worker.run, name=f"{self.name}-{self.started}", daemon=True).start()
            return
        with worker.ready:
            worker.task = task
            worker.ready.notify()

    def idle(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)
            self.busy -= 1

    def retire(self, worker: _Worker) -> bool:
        """An idle thread timed out: True if it may end (nobody handed it a call meanwhile)."""
        with self._lock:
            if worker not in self._idle:
                return False  # `run` took it from the idle list: a call is coming
            self._idle.remove(worker)
            return True

    @property
    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def forget(self) -> None:
        """In a forked child: the parent's threads do not exist here (a work horse)."""
        self._lock = threading.Lock()
        self._idle = []
        self.busy = 0


CALL_THREADS = CallThreads()  # the process's: every session's model calls share it
os.register_at_fork(after_in_child=CALL_THREADS.forget)
