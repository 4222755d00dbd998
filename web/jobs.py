"""The RQ side of dispatch: one job per session on queue `worktrain` (daemon.bus.jobspec).

RQ stores its payloads (JSON: daemon.bus.jobspec.JOB_SERIALIZER) as bytes, so its client must be
a `decode_responses=False` one.
"""

from __future__ import annotations

from typing import Protocol

import redis
from redis.client import Pipeline

from daemon.bus.jobspec import JOB_FUNCTION, job_id, job_queue, job_timeout
from daemon.workflows import WorkflowLimits


class JobQueue(Protocol):
    """What dispatch needs of a job queue: a pipeline to write into, and one enqueue."""

    def pipeline(self) -> Pipeline: ...

    def watching(self, key: str) -> Pipeline: ...

    def enqueue(self, session_id: str, limits: WorkflowLimits, pipeline: Pipeline) -> None: ...


class RqJobQueue:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.queue = job_queue(client)

    def pipeline(self) -> Pipeline:
        """A MULTI/EXEC pipeline already in MULTI mode (RQ requires it for a caller's pipeline)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.multi()
        return pipe

    def watching(self, key: str) -> Pipeline:
        """A MULTI/EXEC pipeline that WATCHes `key`: it reads at once until the caller's
        `multi()`, and its `execute()` raises WatchError if `key` changed meanwhile."""
        pipe = self.client.pipeline(transaction=True)
        pipe.watch(key)  # type: ignore[no-untyped-call]
        return pipe

    def enqueue(self, session_id: str, limits: WorkflowLimits, pipeline: Pipeline) -> None:
        self.queue.enqueue_call(
            JOB_FUNCTION,
            args=(session_id,),
            job_id=job_id(session_id, 1),
            timeout=job_timeout(limits),
            description=f"run session {session_id}",
            pipeline=pipeline,
        )
