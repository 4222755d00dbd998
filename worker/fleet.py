"""A worker process's part in the fleet view (docs/operations.md): its metrics and its presence.

`sandbox_layers()` is the one place that says which sandbox layers are in force for the
worker's presence record (`GET /api/v2/workers`): the sandbox's own report of this process
(daemon/sandbox/report.py, probed once when the worker starts).

`FleetPresence` is for a process that runs no SharedServices of its own (the forking
`--concurrency 1` worker, whose sessions run in work horses): a metrics recorder on its
own connection whose once-a-second flush carries the presence beat. A threaded worker adds
its presence to the recorder its SharedServices already flushes (worker/threaded.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from daemon.bus.fleet.metrics import MetricsRecorder
from daemon.bus.fleet.workers import WorkerPresence
from daemon.bus.keys import Keys
from daemon.host.config import Settings
from daemon.host.redisconn import connect
from daemon.sandbox import report


def sandbox_layers() -> dict[str, str]:
    """Layer -> state, for the worker's presence: each layer its commands run under."""
    return report.layers()


def session_of_job(job: Any) -> str:
    """A session job's session id: its first argument (job ids are `<sid>` or `<sid>-r<n>`)."""
    args = getattr(job, "args", None) or ()
    return str(args[0]) if args else str(job.id).split("-r", 1)[0]


def sessions_of(jobs: Iterable[Any]) -> list[str]:
    return sorted({session_of_job(job) for job in jobs})


def join_fleet(
    recorder: MetricsRecorder, keys: Keys, concurrency: int, sessions: Callable[[], list[str]]
) -> WorkerPresence:
    """Publish this process as a worker with every flush of `recorder`."""
    presence = WorkerPresence(keys, concurrency, sessions, sandbox_layers(), recorder.in_flight)
    recorder.on_flush.append(presence.stage)
    recorder.flush()  # listed at once, not a second later
    recorder.start()
    return presence


class FleetPresence:
    """A recorder and presence of their own, for a worker process without SharedServices."""

    def __init__(self, settings: Settings, concurrency: int, sessions: Callable[[], list[str]]) -> None:
        self.client = connect(settings.redis_url_or_default)
        self.recorder = MetricsRecorder(self.client, Keys(settings.redis_prefix))
        self.presence = join_fleet(self.recorder, self.recorder.keys, concurrency, sessions)

    def close(self) -> None:
        self.recorder.close()
        self.presence.leave(self.client)
