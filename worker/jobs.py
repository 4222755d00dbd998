"""The RQ job: `run_session(session_id)` runs one agent session to its end on this worker.

Dispatch enqueues it by its dotted name (`worker.jobs.run_session`, job id = session id);
a resume job runs the same function. The job builds its own Redis connections (the bus's,
and one for the lease heartbeat thread), the model, the sinks and the catalog, then hands
over to `daemon.session.runner.run_session`. SIGTERM in the work horse asks the session to stop at
its next turn boundary: the turn is checkpointed, the lease released and the session's next
job enqueued, so another worker carries on where this one stopped. An attempt the bus
fenced off writes nothing more: the events it held for its last turn are dropped.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from daemon.bus.fleet.metrics import FENCED
from daemon.host.config import load_settings
from daemon.host.ids import require_session_id
from daemon.session.runner import WorkerServices
from daemon.session.runner import run_session as run_attempt
from worker.logcontext import session_context
from worker.shared import SharedServices

log = logging.getLogger(__name__)


def new_worker_id() -> str:
    """Host, process and a random part: two jobs never share an id, even in one process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@contextmanager
def stop_on_sigterm(
    stop: threading.Event | None = None, cut: Callable[[], object] | None = None
) -> Iterator[threading.Event]:
    """SIGTERM sets the event (the loop stops at its next turn boundary, a wait at once) and
    calls `cut` (the hub's `stop_turns`: a model call in flight is abandoned, so that
    boundary comes now); the previous handler is restored after."""
    stop = stop or threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        log.warning("SIGTERM: stopping the session at its next turn boundary (its live turn cut short)")
        stop.set()
        if cut is not None:  # not in the handler: the interrupted frame may hold the locks it takes
            threading.Thread(target=cut, name="stop-turns", daemon=True).start()

    previous: Any = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


_SHARED: SharedServices | None = None  # set by a worker running its jobs in threads


def use_shared(shared: SharedServices | None) -> None:
    """This process runs many sessions at once: their jobs use `shared` (worker/threaded.py)."""
    global _SHARED
    _SHARED = shared


def run_session(session_id: str) -> str:
    """The RQ job. Returns the attempt's outcome word (stored as the job's result)."""
    require_session_id(session_id)
    with session_context(session_id):
        shared = _SHARED
        if shared is not None:
            try:
                return run_with(session_id, shared.services(new_worker_id(), session_id), shared.stop)
            finally:
                shared.mirror.flush()  # the job's events are in wt:events and the JSONL when it ends
        return run_alone(session_id)


def run_with(session_id: str, services: WorkerServices, stop: threading.Event) -> str:
    """One attempt on services a process shares with its other sessions."""
    outcome = run_attempt(session_id, services, stop.is_set)  # it writes what its attempt queued
    if outcome == "fenced":
        services.calls.metrics.count(FENCED)
    return outcome


def run_alone(session_id: str) -> str:
    """One attempt in a work horse of its own (`--concurrency 1`): the services of a
    process of one session, built in the horse and closed with it."""
    shared = SharedServices(load_settings(), concurrency=1)
    try:
        with stop_on_sigterm(shared.stop, shared.hub.stop_turns):
            return run_with(session_id, shared.services(new_worker_id(), session_id), shared.stop)
    finally:
        shared.close()
