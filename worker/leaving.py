"""An RQ worker leaving while its Redis is gone: RQ's last writes fail fast, its scheduler
is given a moment, then killed.

RQ's teardown tidies its bookkeeping — the worker stops its scheduler process (which
releases its lock and registers its death) and registers its own death — over the worker's
patient connection, which retries a refused connection for WORKER_PATIENCE_SECONDS per
command (daemon/host/redisconn.py). When the Redis is gone for good, say `worktrain up`
killed with SIGKILL taking its embedded Redis along while its worker tier shuts down
warmly (the parent-death SIGTERM), the tree would outlive its parent by minutes (measured:
two). Those records expire by themselves (the worker's key and the scheduler's lock have
TTLs), as does the worker's fleet presence, so a leaving worker tries each once and says
what it left; the sessions it ran were handed over before (or resume after their leases),
so nothing of theirs is at stake here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import redis

from daemon.host.redisconn import stop_retrying

log = logging.getLogger(__name__)

SCHEDULER_STOP_SECONDS = 3.0  # a live Redis: the scheduler's release and exit take milliseconds


def fail_fast(connection: redis.Redis) -> None:
    """No more retries of a refused connection on this client (a leaving process's), on a
    plain or a blocking pool alike."""
    stop_retrying(connection)


def leave(connection: redis.Redis, teardown: Callable[[], None]) -> None:
    """Run RQ's `teardown` with no retry of a refused connection; a Redis that does not
    answer is said, not waited for."""
    fail_fast(connection)
    try:
        teardown()
    except redis.ConnectionError as exc:
        log.warning(
            "leaving without RQ's last records (they expire by themselves): Redis unreachable: %s", exc
        )


def note_shutdown(connection: redis.Redis, write: Callable[[], None]) -> None:
    """RQ's `set_shutdown_requested_date`, run from the SIGINT/SIGTERM handler: on the
    worker's patient client it retried a Redis that is gone for a minute inside the signal
    handler, so a tier whose Redis was gone ignored SIGTERM. A leaving worker's RQ client
    fails fast from here on (its teardown would make it so anyway)."""
    fail_fast(connection)
    try:
        write()
    except redis.RedisError as exc:
        log.warning("shutdown requested; not recorded in RQ's worker hash (Redis unreachable: %s)", exc)


def stop_scheduler(scheduler: Any) -> None:
    """RQ's stop_scheduler (SIGTERM, join), with the join bounded: a scheduler still there
    after SCHEDULER_STOP_SECONDS (retrying a Redis that is gone) is killed; its lock expires."""
    process = getattr(scheduler, "_process", None)
    if process is None or not process.pid:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    process.join(SCHEDULER_STOP_SECONDS)
    if process.is_alive():
        log.warning(
            "RQ scheduler %s did not stop in %.0f s (Redis unreachable?): killed",
            process.pid,
            SCHEDULER_STOP_SECONDS,
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.join()
