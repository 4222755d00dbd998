"""A stop asked of the pool or of one of its workers before RQ installed its handlers is
kept, not lost and not raised mid-fork, and carried out once they are in.

RQ's pool installs its SIGTERM/SIGINT handlers only after it has forked its workers, and each
worker its own only in `work()`; until then the process has daemon/host/startstop.py's
handlers (the pool) or inherits whatever the pool had at the fork (a worker). A signal in
that window either killed the process (-15: `docker compose stop` read a crash) or, raised
as an exception in the middle of multiprocessing's or threading's after-fork code, was
swallowed there, and the worker then listened on with its pool waiting for it. Here the
signal only notes the ask (daemon/host/startstop.py's flag, in each process's own memory);
the pool then stops as RQ's handler would have stopped it, and a worker stops before it
dequeues.

A signal can also be lost outright: CPython clears the signals a child has received but not
yet handled when it sets itself up after the fork (`PyOS_AfterFork_Child`), so the SIGINT a
stopping pool sends a worker it forked a moment before may never reach a handler (seen in
CI: the pool waited for that worker until it was killed). So the pool also says it is
stopping in memory it shares with what it forks (`PoolStopping`, set before it signals), and
a worker reads it once its own handlers are in: whichever comes first, the mark or the
signal, the worker stops.
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
from typing import Any

from rq.worker_pool import WorkerPool

from daemon.host.startstop import STOP_SIGNALS, note_stop, raise_if_stop_asked, stop_asked

log = logging.getLogger(__name__)


class PoolStopping:
    """One byte of memory shared by a pool and everything it forks after making it."""

    def __init__(self) -> None:
        self._byte = mmap.mmap(-1, 1)  # anonymous and MAP_SHARED: a fork shares it, not copies it

    def set(self) -> None:
        self._byte[0] = 1

    def is_set(self) -> bool:
        return self._byte[0] == 1


_pool_pid = 0
_stopping: PoolStopping | None = None  # the pool's, made before it forks (its workers read it)


def _note_stop(signum: int, _frame: object) -> None:
    if _pool_pid in (os.getpid(), os.getppid()):  # the pool, or one of its RQ workers
        # (a worker forked after its pool noted a stop inherits the note: the pool stops it too)
        note_stop(signum)
        if _pool_pid == os.getpid() and _stopping is not None:
            _stopping.set()
        return
    # Forked further down before it set its own handlers (RQ's scheduler, which a worker
    # starts before its handlers): the default, as it was, since nothing here carries it out.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def note_stops() -> None:
    """From now on (and in what this process forks), a stop is noted, not acted on."""
    global _pool_pid, _stopping  # one pool per process; what it forks reads them
    _pool_pid = os.getpid()
    _stopping = PoolStopping()
    for signum in STOP_SIGNALS:
        signal.signal(signum, _note_stop)


def pool_stopping() -> bool:
    """Whether the pool that forked this process (or this process, the pool) is stopping."""
    return _stopping is not None and _stopping.is_set()


class SessionPool(WorkerPool):
    """RQ's pool; a stop asked while it forks its workers is carried out once its handlers
    are in."""

    def start(self, burst: bool = False, logging_level: str = "INFO") -> None:
        raise_if_stop_asked()  # one asked while it started, caught on the way, ends it here
        note_stops()
        super().start(burst=burst, logging_level=logging_level)

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()  # type: ignore[no-untyped-call]
        if stop_asked() is not None:
            self.request_stop()

    def request_stop(self, signum: Any = None, frame: Any = None) -> None:
        if _stopping is not None:
            _stopping.set()  # before the signals: a worker that loses its SIGINT reads this
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]


class StopsAskedBeforeHandlers:
    """For RQ workers forked by a `SessionPool`: one asked to stop before its handlers were
    in, or whose pool is stopping, stops before it dequeues a job (RQ's loop checks
    `_stop_requested` first)."""

    _stop_requested: bool
    name: str

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()  # type: ignore[misc]
        if stop_asked() is not None or pool_stopping():
            log.info("worker %s was asked to stop while it started: stopping", self.name)
            self._stop_requested = True
