"""Workers run WorkTrain's session job and nothing else (docs/security.md).

Whoever can write to Redis can put a job on the `worktrain` queue; RQ would import and call
any function it names (`os.system`, ...) as the worker's user, next to its API key. So a
worker looks at every job before it forks a work horse for it: `admit` lets through only
`worker.jobs.run_session(<session id>)` with no callbacks and no webhooks, and fails any
other job without running it (it lands in RQ's failed registry with the reason, and the
worker logs it). Payloads are read with the JSON serializer (daemon.bus.jobspec), so a pickled
payload is refused as unreadable, never unpickled.
"""

from __future__ import annotations

import logging
from typing import Any

from daemon.bus.jobspec import session_job_problem

log = logging.getLogger(__name__)

_CALLBACKS = ("_success_callback_name", "_failure_callback_name", "_stopped_callback_name")


def refusal(job: Any) -> str | None:
    """Why `job` must not run (None when it is WorkTrain's session job)."""
    try:
        problem = session_job_problem(job.func_name, job.instance, job.args, job.kwargs)
    except Exception as exc:  # noqa: BLE001  # any unreadable payload (a pickle, garbage) is refused
        return f"its payload is not WorkTrain's JSON ({type(exc).__name__})"
    if problem is not None:
        return problem
    if any(getattr(job, name, None) for name in _CALLBACKS):
        return "it names callbacks"
    if getattr(job, "webhooks", None):
        return "it names webhooks"
    return None


def admit(job: Any, queue: Any, connection: Any, worker_name: str = "") -> bool:
    """True when `job` may run; else it is failed, unrun, with the reason, and False."""
    reason = refusal(job)
    if reason is None:
        return True
    log.error("refusing job %s from queue %s without running it: %s", job.id, queue.name, reason)
    from rq.job import JobStatus
    from rq.results import Result

    for name in (*_CALLBACKS, "webhooks"):  # nothing of it runs, its failure included
        if hasattr(job, name):
            setattr(job, name, [] if name == "webhooks" else None)
    why = f"refused by WorkTrain: {reason}"
    with connection.pipeline() as pipe:
        job.set_status(JobStatus.FAILED, pipeline=pipe)
        queue.failed_job_registry.add(job, ttl=job.failure_ttl, exc_string=why, pipeline=pipe)
        Result.create_failure(job, job.failure_ttl, exc_string=why, worker_name=worker_name, pipeline=pipe)
        pipe.lrem(queue.intermediate_queue_key, 1, job.id)
        pipe.execute()
    return False
