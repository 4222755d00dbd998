"""The RQ side of dispatch: one job per session on queue `worktrain` (daemon.bus.jobspec).

The queue itself lives in daemon/bus/session/dispatch.py, where the worker's `spawn_agent` uses it
too; this module keeps the web tier's names for it. RQ stores its payloads (JSON:
daemon.bus.jobspec.JOB_SERIALIZER) as bytes, so its client must be a
`decode_responses=False` one.
"""

from __future__ import annotations

from daemon.bus.session.dispatch import JobQueue, RqJobQueue

__all__ = ["JobQueue", "RqJobQueue"]
