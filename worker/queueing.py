"""Enqueueing resume jobs: a stopping worker's hand-over, and the reaper's orphans (SPEC §6).

A resume job runs the same function as the first job, with the ids and timeout of
daemon.jobspec. Resume jobs go to the front of the queue: a session already under way
carries on before new sessions start.
"""

from __future__ import annotations

import logging

import redis

from daemon.jobspec import JOB_FUNCTION, job_queue, job_timeout, resume_job_id
from daemon.keys import Keys
from daemon.redisconn import as_text
from daemon.workflows import Catalog, WorkflowLimits

log = logging.getLogger(__name__)


class ResumeQueue:
    """Puts resume jobs on the `worktrain` queue."""

    def __init__(self, rq_client: redis.Redis, bus_client: redis.Redis, keys: Keys, catalog: Catalog) -> None:
        self.rq_client = rq_client  # decode_responses=False: RQ's payloads are bytes
        self.bus_client = bus_client
        self.keys = keys
        self.catalog = catalog

    def enqueue(self, session_id: str) -> str:
        """Enqueue the next attempt of `session_id`; returns the job id."""
        record = self.keys.session(session_id).record
        attempt_raw, workflow_id = self.bus_client.hmget(record, ["attempt", "workflowId"])
        attempt = int(as_text(attempt_raw)) + 1 if attempt_raw else 1
        workflow = self.catalog.get(as_text(workflow_id)) if workflow_id else None
        limits = workflow.limits if workflow else WorkflowLimits()
        job_id = resume_job_id(session_id, attempt)
        job_queue(self.rq_client).enqueue_call(
            JOB_FUNCTION,
            args=(session_id,),
            job_id=job_id,
            timeout=job_timeout(limits),
            description=f"resume session {session_id} (attempt {attempt})",
            at_front=True,
        )
        log.info("enqueued %s", job_id)
        return job_id
