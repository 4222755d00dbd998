"""What goes on the RQ queue `worktrain` (daemon.bus.keys.QUEUE_NAME): one place for the job
function, the job ids and the job timeout, shared by dispatch (web) and resume (worker).

The function is named by its dotted path, so the web tier never imports `worker`. A session
counts the jobs enqueued for it (record field `jobs`): job 1 (dispatch) has the session id
as its id, job n > 1 (a hand-over, or the reaper's re-enqueue) `<sessionId>-r<n>` (RQ ids
allow only `[A-Za-z0-9_-]`), so two enqueues never share an id. RQ kills a job that
outlives its timeout: the agent loop enforces the workflow's own wall clock (docs/DEVELOPING.md),
and the margin leaves it room to record the outcome.
Payloads are JSON (`JOB_SERIALIZER`), and a worker runs only jobs that pass
`session_job_problem` (worker/allowlist.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.bus.keys import QUEUE_NAME
from daemon.host.ids import is_session_id
from daemon.workflows import WorkflowLimits

if TYPE_CHECKING:
    import redis
    from redis.client import Pipeline
    from rq import Queue

JOB_FUNCTION = "worker.jobs.run_session"
JOB_TIMEOUT_MARGIN_SECONDS = 600


def job_timeout(limits: WorkflowLimits) -> int:
    return int(limits.maxWallClockSeconds) + JOB_TIMEOUT_MARGIN_SECONDS


def job_id(session_id: str, number: int) -> str:
    """The RQ job id of the session's `number`-th job (1: dispatch's)."""
    return session_id if number <= 1 else f"{session_id}-r{number}"


# Job payloads are JSON, never pickles: a worker unpickling what it finds on the queue would
# run whatever code whoever can write to Redis put there (docs/security.md). Every Queue and
# Worker of WorkTrain is built with this serializer (`job_queue`, worker/pool.py).
JOB_SERIALIZER = "rq.serializers.JSONSerializer"


def job_queue(connection: redis.Redis) -> Queue:
    """The `worktrain` queue, with WorkTrain's serializer (`connection`: decode_responses=False)."""
    from rq import Queue

    return Queue(QUEUE_NAME, connection=connection, serializer=JOB_SERIALIZER)


def enqueue_session_job(
    queue: Queue,
    session_id: str,
    number: int,
    limits: WorkflowLimits,
    pipeline: Pipeline | None = None,
    at_front: bool = False,
) -> str:
    """Put the session's job `number` on `queue` (1: dispatch's, inside its MULTI `pipeline`;
    later ones — a hand-over, a re-enqueue — `at_front`, so a session under way carries on
    before new ones start); returns the job id. The one RQ enqueue of WorkTrain."""
    job = job_id(session_id, number)
    description = f"run session {session_id}" + (f" (job {number})" if number > 1 else "")
    queue.enqueue_call(
        JOB_FUNCTION,
        args=(session_id,),
        job_id=job,
        timeout=job_timeout(limits),
        description=description,
        pipeline=pipeline,
        at_front=at_front,
    )
    return job


def session_job_problem(func_name: object, instance: object, args: object, kwargs: object) -> str | None:
    """Why a job is not WorkTrain's session job (None when it is): the function must be
    JOB_FUNCTION, called with one session id and nothing else."""
    if func_name != JOB_FUNCTION:
        return f"its function is {str(func_name)[:100]!r}, not {JOB_FUNCTION}"
    if instance is not None or kwargs not in (None, {}):
        return "it passes an instance or keyword arguments"
    if not isinstance(args, list | tuple) or len(args) != 1 or not is_session_id(args[0]):
        return "its arguments are not exactly one session id"
    return None


def queue_key() -> str:
    """RQ's list of the jobs waiting on the `worktrain` queue (RQ names it; its length is
    `worktrain_queue_depth`)."""
    from rq.queue import Queue

    return f"{Queue.redis_queue_namespace_prefix}{QUEUE_NAME}"
