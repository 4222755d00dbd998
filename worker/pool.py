"""`worktrain worker [--processes N] [--concurrency C]`: N RQ workers on queue `worktrain`,
each running up to C sessions at once, and a reaper.

The processes are an RQ `WorkerPool` (it forks them and starts a new one when one dies).
With C > 1 (the default, 16) each is a `ThreadedSessionWorker` (worker/threaded.py): every
session job in a thread of its own, sharing the process's Redis pool, model client,
heartbeat loop and idle waiter. With C = 1 each is a `SessionWorker`: RQ's forking worker,
one work horse per session, whose warm shutdown (SIGINT/SIGTERM, as
`docker stop` or `worktrain up` send it) passes SIGTERM on to the work horse running a
session, so the session stops at its next turn boundary and is handed over (lease released,
resume job enqueued) instead of holding the shutdown for the rest of its run.

The pool's parent process also runs the reaper (daemon.bus.fleet.reaper): every third of the lease it
looks for sessions whose worker or job vanished (a dead worker's session, a job lost
between dequeue and claim) and enqueues their next job. And the triggers' loops (README's
Triggers, worker/triggers.py): polls and queued events, one process per trigger fleet-wide
by a lease in Redis. A triggers file with a problem stops the worker before it starts.

No orphans (worker/lifeline.py): a work horse whose RQ worker dies is SIGKILLed with it (its
session resumes elsewhere once the lease lapses), and an RQ worker whose pool parent dies
gets SIGTERM (a warm shutdown: its session is handed over at the next turn boundary). So
`kill -9` of the pool's process group takes the whole tree down, horses included, although
RQ puts each horse in a process group of its own.

Only WorkTrain's session job runs (worker/allowlist.py): any other job found on the queue is
failed without a work horse ever being forked for it. Job payloads are JSON (daemon.bus.jobspec).

Bash isolation (daemon/sandbox/) is probed once at start and each layer said in the log (PID
and network namespaces, Landlock, capabilities, rlimits), a missing one as a warning; with
`WORKTRAIN_SANDBOX=required` a missing layer stops the worker before it takes a job.

Redis restarts: the pool's RQ connection is patient (daemon.host.redisconn), as is each job's, so
a worker idle or mid-session rides out a short outage; the reaper's is fail-fast, a pass
that fails is logged and the next one tries again.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from rq import Worker
from rq.serializers import resolve_serializer

from daemon.agent.model import quiet_http_logs
from daemon.bus.fleet.history import FleetSampler
from daemon.bus.fleet.reaper import Reaper
from daemon.bus.jobspec import JOB_SERIALIZER
from daemon.bus.keys import QUEUE_NAME, Keys
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.host import secrets
from daemon.host.config import Settings, load_settings
from daemon.host.redisconn import (
    WORKER_PATIENCE_SECONDS,
    connect,
    warn_if_unreplicated,
    warn_if_unverified,
    where,
)
from daemon.sandbox import namespaces
from daemon.sandbox import report as sandbox_report
from daemon.triggers.setup import load_triggers
from daemon.workflows import load_catalog
from worker import leaving, logcontext
from worker.allowlist import admit
from worker.dequeue import LeaseBoundDequeue
from worker.fleet import FleetPresence, session_of_job
from worker.giveback import GivesBackCutDequeue
from worker.lifeline import die_with_parent
from worker.logcontext import LOG_FORMAT
from worker.proctitle import TitledWorker
from worker.queueing import SessionJobQueue
from worker.shared import check_model_client
from worker.startstop import SessionPool, StopsAskedBeforeHandlers
from worker.threaded import ThreadedSessionWorker, threaded_worker_class
from worker.triggers import start_triggers
from worker.webhooks import ProcessSender

log = logging.getLogger(__name__)
SAMPLE_CHECK_SECONDS = 10.0  # how often the reaper loop looks whether the minute has its fleet sample


class SessionWorker(StopsAskedBeforeHandlers, TitledWorker, GivesBackCutDequeue, LeaseBoundDequeue, Worker):
    """RQ's forking worker; a warm shutdown asks the running session to hand itself over."""

    def handle_warm_shutdown_request(self) -> None:
        horse = self.horse_pid
        if horse:
            log.info("warm shutdown: asking the session in horse %s to stop at its turn boundary", horse)
            with contextlib.suppress(ProcessLookupError):  # it just ended by itself
                os.kill(horse, signal.SIGTERM)

    running: str | None = None  # the session its work horse runs now (the presence's)

    def stop_scheduler(self) -> None:
        leaving.stop_scheduler(self.scheduler)

    def set_shutdown_requested_date(self) -> None:
        leaving.note_shutdown(self.connection, super().set_shutdown_requested_date)

    def execute_job(self, job: Any, queue: Any) -> None:
        """Fork a work horse for WorkTrain's session job; fail any other job unrun."""
        if admit(job, queue, self.connection, self.name):
            self.running = session_of_job(job)
            try:
                super().execute_job(job, queue)  # returns when the horse has ended
            finally:
                self.running = None

    def main_work_horse(self, job: Any, queue: Any) -> None:
        """The forked horse dies with this worker (self.pid is the worker's pid, copied over)."""
        die_with_parent(self.pid or os.getppid(), signal.SIGKILL)
        super().main_work_horse(job, queue)


def pooled_worker_class(pool_pid: int) -> type[SessionWorker]:
    """SessionWorker for the pool's children: each shuts down warmly when the pool dies."""

    class PooledSessionWorker(SessionWorker):
        def work(self, *args: Any, **kwargs: Any) -> bool:
            die_with_parent(pool_pid, signal.SIGTERM)
            settings = load_settings()
            fleet = FleetPresence(settings, 1, lambda: [self.running] if self.running else [])
            webhooks = ProcessSender(settings)  # README's Webhooks: in this process, not in a horse
            try:
                return bool(super().work(*args, **kwargs))
            finally:
                webhooks.close()
                fleet.close()

    return PooledSessionWorker


class ReaperThread(threading.Thread):
    """The fleet's housekeeping in the pool's parent: a reaper pass every third of the lease,
    and the fleet history's sample of the minute when it has none (daemon/bus/fleet/history.py)."""

    def __init__(self, reaper: Reaper, sampler: FleetSampler | None = None) -> None:
        super().__init__(name="reaper", daemon=True)
        self.reaper = reaper
        self.sampler = sampler
        self.stopped = threading.Event()
        self.next_reap = time.monotonic() + reaper.interval_seconds  # as before: a lease third in

    def run(self) -> None:
        while not self.stopped.wait(min(self.reaper.interval_seconds, SAMPLE_CHECK_SECONDS)):
            self.pass_once()

    def pass_once(self) -> None:
        now = time.monotonic()
        if now >= self.next_reap:
            self.next_reap = now + self.reaper.interval_seconds
            self.guarded("reaper pass", self.reaper.run_once)
        if self.sampler is not None:
            sampler = self.sampler
            self.guarded("fleet sample", lambda: sampler.tick(time.time()))

    @staticmethod
    def guarded(what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except redis.RedisError as exc:  # Redis down or restarting: the next pass retries
            log.warning("%s failed: %s", what, exc)
        except Exception:  # the thread must outlive any bug in one pass
            log.exception("%s failed", what)


def start_reaper(settings: Settings) -> ReaperThread:
    keys = Keys(settings.redis_prefix)
    bus_client = connect(settings.redis_url_or_default)
    jobs = SessionJobQueue(
        connect(settings.redis_url_or_default, decode=False),
        bus_client,
        keys,
        load_catalog(settings.workflows_dir),
    )
    reaper_id = f"{socket.gethostname()}:{os.getpid()}"
    bus = SteerBus(bus_client, keys, retention_seconds=settings.retention_seconds)
    registry = SessionRegistry(bus_client, keys)
    reaper = Reaper(bus, registry, reaper_id, settings.lease_seconds, jobs)
    sampler = FleetSampler(bus_client, keys, registry, settings.max_model_calls)
    thread = ReaperThread(reaper, sampler)
    thread.start()
    return thread


def preload() -> None:
    """Import what every job needs before forking: each work horse then starts warm.

    The anthropic SDK alone takes about a second to import; paid once here, not per job.
    Then `gc.freeze()`: the objects imported so far move to the permanent generation, so the
    collector of a forked worker or work horse never walks them, and never writes to the
    pages it shares with this process (copy-on-write). Measured: a work horse's own memory
    (PSS) 60 -> 31 MiB, i.e. half the memory per running session (docs/benchmarks.md, "Scale").
    """
    import anthropic
    import rq.job

    import worker.jobs

    log.debug("preloaded %s, %s, %s", anthropic.__name__, rq.job.__name__, worker.jobs.__name__)
    gc.freeze()


def private_paths(settings: Settings) -> list[Path]:
    """What an agent's commands must not see: the whole data dir (the embedded Redis' password
    and AOF, `api-token`, `up.json`, `signals/`, logs, the JSONL mirrors, and whatever is added
    there later), covered in their mount namespace by an empty tmpfs. A list of known names
    missed `api-token`, `up.json` and `signals/` where Landlock was off (issue 29, item 9)."""
    return [settings.data_dir]


class RedisUnavailable(RuntimeError):
    pass


def wait_for_redis(client: redis.Redis, url: str, seconds: float = 10.0) -> None:
    """Ping until Redis answers (it may still be starting), else say which URL failed."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            client.ping()
            return
        except redis.RedisError as exc:
            if time.monotonic() >= deadline:
                raise RedisUnavailable(f"Redis at {where(url)} is not reachable (REDIS_URL): {exc}") from exc
        time.sleep(0.25)


def worker_class(concurrency: int) -> type[Worker] | type[ThreadedSessionWorker]:
    """`--concurrency 1`: a forked work horse per session; more: threads in one process."""
    if concurrency <= 1:
        return pooled_worker_class(os.getpid())
    return threaded_worker_class(os.getpid(), concurrency)


def run_workers(
    settings: Settings,
    processes: int,
    burst: bool = False,
    reaper: bool = True,
    concurrency: int = 1,
) -> None:
    """Run until SIGINT/SIGTERM (or, with `burst`, until the queue is empty and every
    session ended)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    quiet_http_logs()  # no INFO line per model call
    logcontext.install()
    namespaces.configure(hidden=private_paths(settings))
    namespaces.report()  # probes once; the forked workers and horses inherit the answer
    sandbox_report.setup(settings)  # every layer, logged; WORKTRAIN_SANDBOX=required refuses here
    check_model_client(settings)  # ModelUnavailable: said once, not a worker failing every second
    catalog = load_catalog(settings.workflows_dir)
    triggers = load_triggers(settings, "worker", catalog, secrets.value)  # TriggerFileError: not started
    url = settings.redis_url_or_default
    warn_if_unverified(url, "worktrain worker")
    warn_if_unreplicated(url, settings.redis_wait_replicas, "worktrain worker")
    wait_for_redis(connect(url, decode=False), url)
    # RQ's connection (its workers rebuild theirs from its settings, retry included)
    rq_client = connect(url, decode=False, socket_timeout=None, patience_seconds=WORKER_PATIENCE_SECONDS)
    preload()
    reaper_thread = start_reaper(settings) if reaper and not burst else None
    trigger_loops = start_triggers(settings, triggers, catalog) if reaper and not burst else None
    try:
        pool = SessionPool(
            [QUEUE_NAME],
            connection=rq_client,
            num_workers=processes,
            worker_class=worker_class(concurrency),
            serializer=resolve_serializer(JOB_SERIALIZER),
        )
        pool.start(burst=burst, logging_level="INFO")
    finally:
        if reaper_thread is not None:
            reaper_thread.stopped.set()
        if trigger_loops is not None:
            trigger_loops.stop()
