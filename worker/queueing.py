"""The RQ side of a session's later jobs: a stopping worker's hand-over, the reaper's
re-enqueues, and what the reaper needs to know about a session's pending job (docs/durability.md).

Every job runs the same function as the first, with the ids and timeout of daemon.bus.jobspec;
the job number comes from the session record (release.lua, reap.lua count it), so two
enqueues never share an id. Later jobs go to the front of the queue: a session already
under way carries on before new sessions start.

`states` reads only RQ's keys — the queue list and each job hash's `status` field — never a
job's payload, so it does not depend on how RQ serializes jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis
from rq.job import Job

from daemon.bus.fleet.reaper import JobState
from daemon.bus.jobspec import enqueue_session_job, job_queue
from daemon.bus.keys import Keys
from daemon.bus.session.registry import record_fields
from daemon.host.redisconn import as_text
from daemon.workflows import Catalog, WorkflowLimits

log = logging.getLogger(__name__)

# A job in one of these states will not run (again): the session needs a new one.
ENDED = frozenset({"finished", "failed", "stopped", "canceled"})


class SessionJobQueue:
    """Enqueues a session's later jobs on `worktrain` and reports its pending job's state."""

    def __init__(self, rq_client: redis.Redis, bus_client: redis.Redis, keys: Keys, catalog: Catalog) -> None:
        self.rq_client = rq_client  # decode_responses=False: RQ's payloads are bytes
        self.bus_client = bus_client
        self.keys = keys
        self.catalog = catalog
        self.queue = job_queue(rq_client)

    def enqueue(self, session_id: str, number: int) -> str:
        """Enqueue the session's job `number` (from release.lua or reap.lua); returns its id."""
        [workflow_id] = record_fields(self.bus_client, self.keys, session_id, "workflowId")
        workflow = self.catalog.get(workflow_id) if workflow_id else None
        limits = workflow.limits if workflow else WorkflowLimits()
        job = enqueue_session_job(self.queue, session_id, number, limits, at_front=True)
        log.info("enqueued %s", job)
        return job

    def sweep_taken(self, job_id: str) -> None:
        """LREM the job from RQ's intermediate list (a worker took it and vanished)."""
        removed = self.rq_client.lrem(self.queue.intermediate_queue_key, 0, job_id)
        if removed:
            log.warning(
                "swept %s from %s (taken by a worker that never ran it)",
                job_id,
                self.queue.intermediate_queue_key,
            )

    def states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """Waiting (in the queue), taken (dequeued, not ended) or gone, in one round trip."""
        pipe = self.rq_client.pipeline(transaction=False)
        pipe.lrange(self.queue.key, 0, -1)
        for job in job_ids:
            pipe.hget(Job.key_for(job), "status")
        queued, *statuses = pipe.execute()
        waiting = {as_text(raw) for raw in queued}
        states = {}
        for job, raw in zip(job_ids, statuses, strict=True):
            status = as_text(raw) if raw is not None else None
            if status is None or status in ENDED:
                states[job] = JobState.GONE
            elif job in waiting and status == "queued":
                states[job] = JobState.WAITING
            else:
                states[job] = JobState.TAKEN
        return states
