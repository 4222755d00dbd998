"""What the reaper reads of RQ (worker/queueing.py), on real Redis with RQ's own calls: a
job waiting in the queue, taken from it, or gone — from the queue list and the job status."""

from __future__ import annotations

import pytest
import redis
from rq import Queue
from rq.job import Job

from daemon.bus.fleet.reaper import JobState
from daemon.bus.keys import QUEUE_NAME, Keys
from tests.agent.conftest import CATALOG
from tests.worker.conftest import WorkerEnv
from worker.queueing import SessionJobQueue

pytestmark = pytest.mark.unit


def queue_for(env: WorkerEnv) -> SessionJobQueue:
    return SessionJobQueue(env.rq_client, env.client, Keys("wt"), CATALOG)


def test_waiting_taken_and_gone(worker_env: WorkerEnv) -> None:
    jobs = queue_for(worker_env)
    sid = worker_env.dispatch()
    waiting = jobs.enqueue(sid, 2)
    taken = jobs.enqueue(sid, 3)
    ended = jobs.enqueue(sid, 4)
    assert waiting == f"{sid}-r2"
    rq: redis.Redis = worker_env.rq_client
    queue = Queue(QUEUE_NAME, connection=rq)
    # a worker takes job 3 the way RQ does (BLMOVE into the intermediate list) and dies
    rq.lrem(queue.key, 1, taken)
    rq.rpush(queue.intermediate_queue_key, taken)
    Job.fetch(ended, connection=rq).set_status("failed")
    rq.lrem(queue.key, 1, ended)
    states = jobs.states([waiting, taken, ended, f"{sid}-r9"])
    assert states == {
        waiting: JobState.WAITING,
        taken: JobState.TAKEN,
        ended: JobState.GONE,
        f"{sid}-r9": JobState.GONE,
    }


def test_later_jobs_go_to_the_front_with_their_own_ids(worker_env: WorkerEnv) -> None:
    jobs = queue_for(worker_env)
    worker_env.enqueue(first := worker_env.dispatch())
    second = worker_env.dispatch()
    assert jobs.enqueue(second, 2) == f"{second}-r2"
    assert Queue(QUEUE_NAME, connection=worker_env.rq_client).job_ids == [f"{second}-r2", first]
