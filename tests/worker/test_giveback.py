"""A job that a stopping worker's cut-off dequeue took is given back (worker/giveback.py), on a
real Redis.

The race, made certain: the worker blocks in RQ's BLMOVE; SIGTERM comes; its warm-shutdown
handler enqueues a session's next job before the handler raises (what a session cut short
by the stop does milliseconds later, while Redis may not yet have read the closed socket).
Redis hands the job to the still-blocked BLMOVE, whose reply nobody reads: the job sits in
RQ's intermediate list. Without the give-back it waits there for the reaper's watch mark (a
lease and a pass); with it, the worker's teardown puts it back at the front of the queue.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from rq.exceptions import StopRequested

from daemon.bus.jobspec import JOB_SERIALIZER, enqueue_session_job, job_queue
from daemon.workflows import WorkflowLimits
from worker.giveback import give_back_taken
from worker.pool import SessionWorker
from worker.threaded import ThreadedSessionWorker

pytestmark = pytest.mark.unit

HANDED_OVER = "sess_01JD0000000000000000000HND"
OTHER = "sess_01JD0000000000000000000OTH"


@pytest.fixture
def rq_client(real_redis: redis.Redis) -> Iterator[redis.Redis]:
    kwargs = real_redis.connection_pool.connection_kwargs
    client = redis.Redis(host=kwargs["host"], port=kwargs["port"])
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def restored_signals() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def stopping_worker(base: type[Any], rq_client: redis.Redis) -> Any:
    """`base` whose warm shutdown hands a session over at once, inside the signal handler."""
    queue = job_queue(rq_client)

    class HandsOverAtTheStop(base):  # type: ignore[misc, valid-type]
        def handle_warm_shutdown_request(self) -> None:
            enqueue_session_job(queue, HANDED_OVER, 2, WorkflowLimits(), at_front=True)

    worker = HandsOverAtTheStop([queue], connection=rq_client, serializer=JOB_SERIALIZER)
    worker.register_birth()
    return worker


def blocked_in_blmove(client: redis.Redis) -> bool:
    return any(entry.get("cmd") == "blmove" for entry in client.client_list())


def sigterm_once_blocked(client: redis.Redis) -> threading.Thread:
    def send() -> None:
        deadline = time.monotonic() + 10
        while not blocked_in_blmove(client) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("base", [ThreadedSessionWorker, SessionWorker], ids=["threaded", "forking"])
def test_a_job_the_cut_dequeue_took_goes_back_to_the_front_of_the_queue(
    base: type[Any], rq_client: redis.Redis, real_redis: redis.Redis, restored_signals: None
) -> None:
    queue = job_queue(rq_client)
    enqueue_session_job(queue, OTHER, 1, WorkflowLimits())  # a new session, behind it
    rq_client.delete(queue.key)  # ... not yet in the queue: the BLMOVE must block
    worker = stopping_worker(base, rq_client)
    worker._install_signal_handlers()
    sender = sigterm_once_blocked(real_redis)
    with pytest.raises(StopRequested):
        worker.dequeue_job_and_maintain_ttl(5)
    sender.join()
    handed_over = f"{HANDED_OVER}-r2"
    # the race, reproduced: the hand-over's job went to the BLMOVE nobody reads any more
    taken = [raw.decode() for raw in rq_client.lrange(queue.intermediate_queue_key, 0, -1)]
    assert taken == [handed_over]
    rq_client.rpush(queue.key, OTHER)
    worker.teardown()
    assert [raw.decode() for raw in rq_client.lrange(queue.key, 0, -1)] == [handed_over, OTHER]
    assert rq_client.llen(queue.intermediate_queue_key) == 0


def test_a_started_job_stays_and_an_uncut_worker_gives_nothing_back(
    rq_client: redis.Redis, restored_signals: None
) -> None:
    queue = job_queue(rq_client)
    started = enqueue_session_job(queue, OTHER, 1, WorkflowLimits())
    taken = enqueue_session_job(queue, HANDED_OVER, 2, WorkflowLimits())
    rq_client.delete(queue.key)
    rq_client.rpush(queue.intermediate_queue_key, started, taken)
    rq_client.hset(f"rq:job:{started}", "status", "started")  # a live worker runs it
    worker = ThreadedSessionWorker([queue], connection=rq_client, serializer=JOB_SERIALIZER)
    worker.register_birth()
    worker.teardown()  # its dequeue was never cut: nothing is given back
    assert rq_client.llen(queue.key) == 0
    assert give_back_taken(rq_client, [queue]) == [taken]
    assert [raw.decode() for raw in rq_client.lrange(queue.intermediate_queue_key, 0, -1)] == [started]
    assert [raw.decode() for raw in rq_client.lrange(queue.key, 0, -1)] == [taken]
