"""The RQ side of dispatch: one job per session on queue `worktrain`, by dotted function name.

The web tier never imports `worker`: RQ stores the function as the string
`worker.jobs.run_session`, resolved by the worker process that runs the job.
RQ pickles into Redis, so its client must be a `decode_responses=False` one.
"""

from __future__ import annotations

from typing import Protocol

import redis
from redis.client import Pipeline
from rq import Queue

from daemon.keys import QUEUE_NAME

JOB_FUNCTION = "worker.jobs.run_session"
# RQ kills a job that outlives its timeout. The agent loop enforces the workflow's own wall
# clock (SPEC §4.1); this margin leaves it room to finish and record the outcome itself.
JOB_TIMEOUT_MARGIN_SECONDS = 600


class JobQueue(Protocol):
    """What dispatch needs of a job queue: a pipeline to write into, and one enqueue."""

    def pipeline(self) -> Pipeline: ...

    def enqueue(self, session_id: str, wall_clock_seconds: float, pipeline: Pipeline) -> None: ...


class RqJobQueue:
    def __init__(self, client: redis.Redis, name: str = QUEUE_NAME) -> None:
        self.client = client
        self.queue = Queue(name, connection=client)

    def pipeline(self) -> Pipeline:
        """A MULTI/EXEC pipeline already in MULTI mode (RQ requires it for a caller's pipeline)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.multi()
        return pipe

    def enqueue(self, session_id: str, wall_clock_seconds: float, pipeline: Pipeline) -> None:
        self.queue.enqueue_call(
            JOB_FUNCTION,
            args=(session_id,),
            job_id=session_id,
            timeout=int(wall_clock_seconds) + JOB_TIMEOUT_MARGIN_SECONDS,
            description=f"run session {session_id}",
            pipeline=pipeline,
        )
