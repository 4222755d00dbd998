"""RQ's bookkeeping for a worker that runs its jobs in threads (worker/threaded.py): the
keeper keeps every running job's StartedJobRegistry entry fresh in one pipeline, so RQ's
maintenance never takes a live session's job for abandoned, while a job nobody runs any
more is still failed as RQ would."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.worker import WorkerStatus

from daemon.bus.jobspec import JOB_FUNCTION, JOB_SERIALIZER, job_queue
from tests.roundtrips import CountingConnection, RoundTrips
from worker.threaded import Running, ThreadedSessionWorker

pytestmark = pytest.mark.unit

SIDS = [f"sess_01JD000000000000000000000{i}" for i in range(3)]


def test_the_keeper_keeps_live_jobs_started_and_rq_fails_only_the_abandoned_one(
    redis_server: object, real_redis: redis.Redis
) -> None:
    url = real_redis.connection_pool.connection_kwargs
    pool = redis.ConnectionPool(host=url["host"], port=url["port"], connection_class=CountingConnection)
    rq = redis.Redis(connection_pool=pool)
    queue = job_queue(rq)
    worker = ThreadedSessionWorker([queue], connection=rq, serializer=JOB_SERIALIZER)
    worker.register_birth()
    jobs = [queue.enqueue_call(JOB_FUNCTION, args=(sid,), job_id=sid, timeout=600) for sid in SIDS]
    idle = threading.Thread(target=lambda: None)
    for job in jobs:
        execution = worker.prepare_execution(job)
        with rq.pipeline() as pipe:  # what RQ's perform_job does first: the job STARTED
            job.prepare_for_execution(worker.name, pipe)
            pipe.execute()
        if job.id != SIDS[2]:  # the third is not running here any more (as after a kill)
            worker._running[execution.id] = Running(job, execution, idle)
    registry = StartedJobRegistry(queue=queue)
    before = dict(rq.zrange(registry.key, 0, -1, withscores=True))  # type: ignore[arg-type]
    assert worker.get_heartbeat_ttl(jobs[0], working_time=10_000) == 90  # never shrinks to the timeout
    time.sleep(1.1)
    with RoundTrips() as trips:
        worker.maintain_all_heartbeats()
    assert trips.count == 1  # every running job of the process in one pipeline
    after = dict(rq.zrange(registry.key, 0, -1, withscores=True))  # type: ignore[arg-type]
    for key, score in before.items():
        refreshed = after[key] > score
        assert refreshed == (not key.decode().startswith(SIDS[2])), (key, score, after[key])
    # RQ's maintenance, at a moment past every entry's first expiry: only the third expired
    registry.cleanup(timestamp=max(before.values()) + 0.5)
    failed = FailedJobRegistry(queue=queue)
    assert failed.get_job_ids() == [SIDS[2]]
    assert sorted(registry.get_job_ids()) == SIDS[:2]
    worker.set_state(WorkerStatus.IDLE)  # what RQ's loop says between dequeues
    assert worker.get_state() == WorkerStatus.BUSY  # busy while any session runs
    rq.close()
