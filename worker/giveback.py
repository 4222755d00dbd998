"""A job that a stopping worker's cut-off dequeue took goes back to the front of the queue.

A stop (SIGTERM/SIGINT) interrupts a worker blocked in RQ's BLMOVE (queue -> the queue's
intermediate list) by raising in the signal handler; redis-py then closes the socket. But
Redis learns of that only when it reads the close, and until then the BLMOVE is still
blocked there: a job pushed meanwhile is moved to the intermediate list for a client that is
gone. The job pushed in that instant is often the hand-over of a session the same stop just
cut short (its enqueue comes milliseconds after the signal), or another stopping worker's.
Nobody runs it: the reaper finds it taken and unclaimed and requeues it only after a watch
mark, a lease and a pass later (seen: a session handed over by Ctrl-C of `worktrain up`
resumed 54 s after the next `up`, where it should resume at once).

So a worker whose dequeue a stop cut, once its sessions have handed over (their enqueues
done: any job its BLMOVE could take has been taken by then), gives back every job of the
intermediate list that no worker has started (give_back.lua: status still `queued`). A job
that a live worker took in the same instant and has not yet marked started is given back
too; it then runs twice at most as an RQ job, and the second run's claim of the session is
refused (claim.lua), a `skipped` attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import redis
from rq.exceptions import StopRequested
from rq.job import Job

from daemon.bus.scripts import GIVE_BACK, Registered
from daemon.host.redisconn import as_text
from worker import leaving

log = logging.getLogger(__name__)


def give_back_taken(connection: redis.Redis, queues: Iterable[Any]) -> list[str]:
    """Give back each unstarted job of each queue's intermediate list; the ids given back."""
    give_back = Registered(GIVE_BACK, connection)
    given: list[str] = []
    for queue in queues:
        for raw in connection.lrange(queue.intermediate_queue_key, 0, -1):
            job_id = as_text(raw)
            keys = [queue.intermediate_queue_key, queue.key, Job.key_for(job_id)]
            if give_back(keys, [job_id]):
                given.append(job_id)
    if given:
        log.info("gave back %s, taken by this worker's dequeue after its stop", ", ".join(given))
    return given


class GivesBackCutDequeue:
    """Mixed into WorkTrain's RQ worker classes (before RQ's own): a stop that cuts the
    blocked dequeue is remembered, and the teardown (which runs once the worker's sessions
    have handed over) gives back what that dequeue may have taken, then RQ's own teardown
    runs; neither waits for a Redis that is gone (worker/leaving.py)."""

    _dequeue_cut = False
    connection: redis.Redis
    queues: list[Any]

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        try:
            return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)  # type: ignore[misc]
        except StopRequested:
            self._dequeue_cut = True
            raise

    def teardown(self) -> None:
        leaving.leave(self.connection, self._give_back_then_tear_down)

    def _give_back_then_tear_down(self) -> None:
        if self._dequeue_cut:
            try:
                give_back_taken(self.connection, self.queues)
            except redis.RedisError as exc:  # the reaper requeues such a job a lease and a pass later
                log.warning("could not give back jobs taken after the stop (the reaper will): %s", exc)
        super().teardown()  # type: ignore[misc]
