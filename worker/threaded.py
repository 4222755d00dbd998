"""An RQ worker that runs up to C session jobs at once, each in a thread (`--concurrency C`).

RQ 3.0 has no concurrent worker (its forking `Worker` runs one job per work horse), so this
is RQ's `BaseWorker` with its loop kept and only the execution changed. What RQ's
semantics need, and how they are kept:

- **dequeue only when a slot is free**: `dequeue_job_and_maintain_ttl` first waits until
  fewer than C sessions run (or a stop is requested), then blocks on the queue as RQ does.
- **each session one RQ job, shown as started**: `execute_job` admits the job
  (worker/allowlist.py), calls RQ's own `prepare_execution` (the Execution, the
  StartedJobRegistry entry, the worker BUSY) and runs RQ's own `perform_job` in a thread of
  its own: `prepare_job_execution`, the job, `handle_job_success`/`handle_job_failure`
  (finished/failed, the registries cleaned), exactly as in a work horse. The worker stays
  BUSY while any session runs.
- **never abandoned while alive**: a work horse's parent refreshes its job's heartbeat,
  execution and StartedJobRegistry score every `job_monitoring_interval`; here one keeper
  thread does it for every running job of the process in one pipeline. The TTL does not
  shrink towards the job's timeout: a thread cannot be killed at a timeout, so RQ's own
  job timeout is not enforced here (the session ends itself at its workflow's wall-clock
  and stall limits, checked before every model call), and a live job's entry must never
  expire. Only a dead or frozen process lets it lapse; RQ's maintenance then fails the job
  (`AbandonedJobError`) and WorkTrain's reaper resumes the session once its lease lapses.
- **warm shutdown** (SIGTERM/SIGINT): every running session is asked to stop at its next
  turn boundary (one process-wide event; each hands itself over: checkpoint, release,
  next job enqueued), no job is dequeued any more, and the process exits once they have.
  A second signal is RQ's cold shutdown: the process exits at once, its sessions resume
  elsewhere after their leases.

The sessions share one process's services (worker/shared.py): the Redis pool, the model
client, the model-slot listener, one lease heartbeat loop and one idle waiter.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass
from typing import Any

import redis
from rq.exceptions import StopRequested
from rq.timeouts import BaseDeathPenalty
from rq.utils import now
from rq.worker import BaseWorker, WorkerStatus

from daemon.host import faults
from daemon.host.config import load_settings
from worker import jobs, leaving
from worker.allowlist import admit
from worker.dequeue import LeaseBoundDequeue
from worker.fleet import join_fleet, sessions_of
from worker.giveback import GivesBackCutDequeue
from worker.lifeline import die_with_parent
from worker.proctitle import TitledWorker
from worker.shared import SharedServices
from worker.startstop import StopsAskedBeforeHandlers
from worker.webhooks import ProcessSender

log = logging.getLogger(__name__)

SLOT_POLL_SECONDS = 1.0  # how often a full worker re-checks for a stop while it waits for a slot


class NoDeathPenalty(BaseDeathPenalty):
    """RQ's job timeout cannot stop a thread; the session ends itself at its limits."""

    def setup_death_penalty(self) -> None:
        return None

    def cancel_death_penalty(self) -> None:
        return None


@dataclass
class Running:
    job: Any
    execution: Any
    thread: threading.Thread


class ThreadedSessionWorker(
    StopsAskedBeforeHandlers, TitledWorker, GivesBackCutDequeue, LeaseBoundDequeue, BaseWorker
):
    death_penalty_class = NoDeathPenalty
    concurrency = 16

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.Condition()
        self._running: dict[str, Running] = {}
        self._dequeuing = False
        self._cold = False
        self._burst = False
        self._keeper_stop = threading.Event()
        self.shared: SharedServices | None = None

    # --- the loop: RQ's own, with a slot wait before each dequeue ---------------------------

    def work(self, *args: Any, **kwargs: Any) -> bool:
        self._burst = bool(kwargs.get("burst", args[0] if args else False))
        settings = load_settings()
        self.shared = SharedServices(settings, self.concurrency)
        presence = join_fleet(self.shared.metrics, self.shared.keys, self.concurrency, self.sessions)
        webhooks = ProcessSender(settings)  # README's Webhooks: on threads of its own
        jobs.use_shared(self.shared)
        faults.worker_runs_jobs_itself()  # "kill": "worker" kills this process: no horse here
        keeper = threading.Thread(target=self._keep_jobs_fresh, name="rq-keeper", daemon=True)
        keeper.start()
        log.info("worker %s runs up to %d sessions at once (threads)", self.name, self.concurrency)
        try:
            return bool(super().work(*args, **kwargs))
        finally:
            self._keeper_stop.set()
            webhooks.close()
            jobs.use_shared(None)
            self.shared.close()
            leaving.fail_fast(self.shared.client)  # the presence expires by itself if Redis is gone
            presence.leave(self.shared.client)

    def sessions(self) -> list[str]:
        """The sessions this process runs now (its presence, `GET /api/v2/workers`)."""
        with self._slots:
            return sessions_of(item.job for item in self._running.values())

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        with self._slots:
            while len(self._running) >= self.concurrency and not self._stop_requested:
                self._slots.wait(SLOT_POLL_SECONDS)
        while not self._stop_requested:
            self._dequeuing = True
            try:
                result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            finally:
                self._dequeuing = False
            if result is not None or not self._burst:
                return result
            # burst: the queue is empty; quit once every session ended (one may enqueue more)
            with self._slots:
                if not self._running:
                    return None
                self._slots.wait(SLOT_POLL_SECONDS)
        return None

    def execute_job(self, job: Any, queue: Any) -> None:
        """Start the session job in a thread of its own; return at once (the loop then waits
        for a free slot before it dequeues again)."""
        if not admit(job, queue, self.connection, self.name):
            return
        execution = self.prepare_execution(job)
        thread = threading.Thread(
            target=self._perform, args=(job, queue, execution), name=f"session-{job.id}", daemon=True
        )
        with self._slots:
            self._running[execution.id] = Running(job, execution, thread)
        thread.start()

    def _perform(self, job: Any, queue: Any, execution: Any) -> None:
        try:
            self.perform_job(job, queue, execution)  # RQ's: success/failure handled inside
        except Exception:  # RQ handles the job's own errors; this is RQ's bookkeeping failing
            log.exception("job %s: RQ could not record its end", job.id)
        finally:
            with self._slots:
                self._running.pop(execution.id, None)
                self.executions.pop(execution.id, None)
                idle = not self._running
                self._slots.notify_all()
            if idle:
                try:
                    self.set_state(WorkerStatus.IDLE)
                except redis.RedisError as exc:
                    log.warning("worker state not set to idle: %s", exc)

    def set_state(self, state: str, pipeline: Any = None) -> None:
        """BUSY while any session runs, whatever RQ's loop says between two dequeues."""
        if state == WorkerStatus.IDLE and getattr(self, "_running", None):
            state = WorkerStatus.BUSY
        super().set_state(state, pipeline=pipeline)

    def get_heartbeat_ttl(self, job: Any, working_time: float = 0.0) -> int:
        """Never shorter than a monitoring interval plus a minute (see the module note)."""
        return int(self.job_monitoring_interval) + 60

    # --- the keeper: RQ's heartbeats for every running job, one pipeline ---------------------

    def _keep_jobs_fresh(self) -> None:
        while not self._keeper_stop.wait(self.job_monitoring_interval):
            try:
                self.maintain_all_heartbeats()
            except redis.RedisError as exc:  # the next beat tries again (a live entry has 60 s to spare)
                log.warning("RQ job heartbeats failed: %s", exc)
            except Exception:
                log.exception("RQ job heartbeats failed")

    def maintain_all_heartbeats(self) -> None:
        """What RQ's `maintain_heartbeats` does for one job, for all of them at once."""
        with self._slots:
            running = list(self._running.values())
        worker_ttl = int(self.job_monitoring_interval) + 60
        with self.connection.pipeline() as pipe:
            self.heartbeat(worker_ttl, pipeline=pipe)
            marks = []
            for item in running:
                ttl = self.get_heartbeat_ttl(item.job)
                item.execution.heartbeat(item.job.started_job_registry, ttl, pipeline=pipe)
                marks.append(len(pipe))
                item.job.heartbeat(now(), ttl, pipeline=pipe, xx=True)
            results = pipe.execute()
            # as RQ does: a job heartbeat that created the hash means the job is gone already
            for item, mark in zip(running, marks, strict=True):
                if results[mark] == 1:
                    pipe.delete(item.job.key)
            if results and results[0] == 1:  # the worker's hash had expired: write it again
                pipe.hset(self.key, mapping=self.serialize())
                pipe.expire(self.key, worker_ttl)
            pipe.execute()

    # --- shutdown ----------------------------------------------------------------------------

    def handle_warm_shutdown_request(self) -> None:
        count = len(self._running)
        log.info("warm shutdown: stopping %d session(s), each cut short now and handed over", count)
        if self.shared is not None:
            self.shared.stop.set()
            # a model call in flight is abandoned, not waited for (in a thread: this runs in a
            # signal handler, and the interrupted frame may hold the locks stop_turns takes)
            threading.Thread(target=self.shared.hub.stop_turns, name="stop-turns", daemon=True).start()

    def _shutdown(self) -> None:
        """Unlike RQ's (wait for the one horse), stop dequeuing and let the sessions hand over.
        Only a blocked dequeue is interrupted (as RQ interrupts an idle worker)."""
        self._stop_requested = True
        self.set_shutdown_requested_date()
        if self._dequeuing:
            raise StopRequested()

    def request_force_stop(self, signum: int, frame: Any) -> None:
        try:
            super().request_force_stop(signum, frame)
        except SystemExit:
            self._cold = True
            raise

    def teardown(self) -> None:
        """Wait for the running sessions (handing over, or, in burst mode, to their end)."""
        if not self._cold:
            if self.shared is not None and not self._burst:
                self.shared.stop.set()
            with self._slots:
                threads = [r.thread for r in self._running.values()]
            if threads:
                log.info("waiting for %d session(s) to hand over or end", len(threads))
            for thread in threads:
                thread.join()
        super().teardown()  # jobs its cut dequeue took given back, then RQ's (worker/giveback.py)

    def stop_scheduler(self) -> None:
        leaving.stop_scheduler(self.scheduler)

    def set_shutdown_requested_date(self) -> None:
        leaving.note_shutdown(self.connection, super().set_shutdown_requested_date)


def threaded_worker_class(pool_pid: int, concurrency: int) -> type[ThreadedSessionWorker]:
    """For the pool's children: C sessions each; a warm shutdown when the pool dies."""

    class PooledThreadedWorker(ThreadedSessionWorker):
        def work(self, *args: Any, **kwargs: Any) -> bool:
            die_with_parent(pool_pid, signal.SIGTERM)
            return super().work(*args, **kwargs)

    PooledThreadedWorker.concurrency = concurrency
    log.debug("threaded workers of pool %d: %d sessions each", os.getpid(), concurrency)
    return PooledThreadedWorker
