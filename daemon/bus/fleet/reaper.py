"""The reaper (docs/durability.md "Receipts and stuck sessions"): no session stays stuck.

Each `worktrain worker` runs one on a timer in its pool's parent process (not with
--burst); a lock key lets one reaper act per interval (a third of the lease) across all
hosts. Each pass walks the active index and, for every session, reads its record and lease
and, where it matters, its pending job in RQ's own keys (through `SessionJobs`: queue list
and job status, never the job payload). Then `decide` says what to do:

- a live session that a worker holds (or a reaper's mark holds) is left alone;
- a live session nobody holds whose job waits in the queue is left alone (however busy the
  workers are: an expired mark never enqueues a second job);
- one whose job was taken from the queue but never claimed it (its worker died between
  dequeue and claim) gets a `reaper:watch` mark: the worker has until it expires to claim;
  a pass after that re-enqueues. So such a session runs again within a lease plus a pass;
- one with no job (the attempt that claimed it died: `running`/`waiting` with its lease
  expired) or whose job is gone (failed, finished without claiming, missing) is enqueued
  again at once, with its next job number (reap.lua re-checks nothing changed meanwhile);
- a finished session still in the active index (its worker died between finish.lua and
  marking it) moves to the `expiring` index; an id whose record is gone leaves every index.

RQ's own abandoned-job cleanup is not relied on: it can take many minutes (rq #2015, #2236).
A job a vanished worker took (RQ's `rq:queue:worktrain:intermediate` list: BLMOVE moved it
there, the reply never reached the worker) is swept from that list when the reaper enqueues
the session's next job, so the list never keeps superseded jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import redis

from daemon.bus.jobspec import job_id
from daemon.bus.replies import Reaped, per_item
from daemon.bus.scripts import REAP
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.host.redisconn import as_text
from daemon.schema.records import SessionStatus

log = logging.getLogger(__name__)

CHUNK = 200  # sessions read per pipelined round trip
LIVE = frozenset({SessionStatus.QUEUED.value, SessionStatus.RUNNING.value, SessionStatus.WAITING.value})


class JobState(StrEnum):
    WAITING = "waiting"  # in the queue: a worker will take it
    TAKEN = "taken"  # taken from the queue, not ended: its worker should be claiming
    GONE = "gone"  # no such job, or it ended (failed, finished, stopped, canceled)


class SessionJobs(Protocol):
    """The job queue as the reaper sees it (worker/queueing.py implements it over RQ)."""

    def states(self, job_ids: Sequence[str]) -> dict[str, JobState]: ...

    def enqueue(self, session_id: str, number: int) -> object: ...

    def sweep_taken(self, job_id: str) -> None:
        """Drop a superseded job from the list of jobs taken off the queue (RQ's
        intermediate list): a worker that took it and vanished will never run it."""


class Action(StrEnum):
    NOTHING = "nothing"
    WATCH = "watch"
    REQUEUE = "requeue"
    RETIRE = "retire"  # finished: move from the active index to `expiring`
    FORGET = "forget"  # the record is gone: drop the id from every index


@dataclass(frozen=True, slots=True)
class SessionView:
    """What one pass reads of one session (one pipelined round trip per CHUNK sessions)."""

    session_id: str
    status: str | None  # None: no record
    attempt: str
    jobs: str
    job_pending: bool
    watched_job: str
    leased: bool  # a lease key exists (a worker's or a reaper's mark)
    ttl_ms: int

    @property
    def job_id(self) -> str:
        return job_id(self.session_id, int(self.jobs or 1))

    @property
    def needs_job_state(self) -> bool:
        return self.status in LIVE and not self.leased and self.job_pending


def decide(view: SessionView, job: JobState | None) -> Action:
    """What the reaper does about one session (pure: tests drive it with every case)."""
    if view.status is None:
        return Action.FORGET
    if view.status not in LIVE:
        return Action.RETIRE
    if view.leased:
        return Action.NOTHING
    if not view.job_pending:
        return Action.REQUEUE  # the attempt that consumed the job died
    if job is JobState.WAITING:
        return Action.NOTHING
    if job is JobState.TAKEN and view.watched_job != (view.jobs or "1"):
        return Action.WATCH
    return Action.REQUEUE


def chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Reaper:
    def __init__(
        self,
        bus: SteerBus,
        registry: SessionRegistry,
        reaper_id: str,
        lease_seconds: float,
        jobs: SessionJobs,
    ) -> None:
        self.bus = bus
        self.registry = registry
        self.reaper_id = reaper_id
        self.lease_ms = int(lease_seconds * 1000)
        self.jobs = jobs

    @property
    def interval_seconds(self) -> float:
        """How often to look: a third of the lease, so a dead worker is noticed within lease + 1/3."""
        return max(self.lease_ms / 3000, 0.2)

    @property
    def watch_ms(self) -> int:
        """How long a taken job has to claim: with the pass that notices and the pass that
        re-enqueues, the session runs again within a lease plus one pass."""
        return max(self.lease_ms - int(self.interval_seconds * 1000), 100)

    def run_once(self) -> list[str]:
        """One pass; returns the ids of the sessions it enqueued again."""
        client = self.bus.client
        lock_ms = max(int(self.interval_seconds * 1000) - 50, 100)
        if not client.set(self.bus.keys.reaper_lock, self.reaper_id, nx=True, px=lock_ms):
            return []  # another reaper acts in this interval
        self.registry.prune()
        ids = [as_text(raw) for raw in client.zrange(self.bus.keys.active, 0, -1)]
        requeued: list[str] = []
        for chunk in chunks(ids, CHUNK):
            views = self.read(chunk)
            pending = [view.job_id for view in views if view.needs_job_state]
            states = self.jobs.states(pending) if pending else {}
            for view in views:
                action = decide(view, states.get(view.job_id))
                if self.act(view, action):
                    requeued.append(view.session_id)
        return requeued

    def read(self, session_ids: Iterable[str]) -> list[SessionView]:
        ids = list(session_ids)
        pipe = self.bus.client.pipeline(transaction=False)
        for session_id in ids:
            keys = self.bus.keys.session(session_id)
            pipe.hmget(keys.record, ["status", "attempt", "jobs", "jobPending", "watchedJob"])
            pipe.exists(keys.lease)
            pipe.pttl(keys.record)
        views = []
        for session_id, ((status, attempt, jobs, pending, watched), leased, ttl) in zip(
            ids, per_item(pipe.execute(), 3), strict=True
        ):
            status = as_text(status) if status is not None else None
            views.append(
                SessionView(
                    session_id=session_id,
                    status=status,
                    attempt=as_text(attempt or ""),
                    jobs=as_text(jobs or ""),
                    # a queued session registered before job counting had its job 1 pending
                    job_pending=pending is not None or (status == "queued" and jobs is None),
                    watched_job=as_text(watched or ""),
                    leased=bool(leased),
                    ttl_ms=int(ttl),
                )
            )
        return views

    def act(self, view: SessionView, action: Action) -> bool:
        """Carry out one decision; True when a job was enqueued."""
        if action is Action.FORGET:
            self.registry.forget([view.session_id])
        elif action is Action.RETIRE:
            ttl_ms = view.ttl_ms if view.ttl_ms > 0 else self.bus.retention_seconds * 1000
            self.registry.mark_finished(view.session_id, ttl_ms / 1000)
        elif action is Action.WATCH:
            if self._reap(view, "watch", self.watch_ms).outcome == "watching":
                log.info("session %s: job %s taken, not claimed yet; watching", view.session_id, view.job_id)
        elif action is Action.REQUEUE:
            return self._requeue(view)
        return False

    def _reap(self, view: SessionView, action: str, mark_ms: int) -> Reaped:
        keys = self.bus.keys.session(view.session_id)
        args = [self.reaper_id, mark_ms, action, view.attempt, view.jobs]
        return self.bus.scripts.run(REAP, keys, args)

    def _requeue(self, view: SessionView) -> bool:
        reaped = self._reap(view, "requeue", self.lease_ms)
        if reaped.outcome != "requeued":
            return False  # a claim (or an end) came in since the read: nothing to do
        number = reaped.job
        log.warning(
            "session %s (%s, attempt %s) has no live worker or job; enqueueing job %d",
            view.session_id, view.status, view.attempt or 0, number,
        )  # fmt: skip
        try:
            self.jobs.enqueue(view.session_id, number)
            self.jobs.sweep_taken(view.job_id)  # job `number - 1`, lost by the worker that took it
        except redis.RedisError:
            # The mark expires after one lease; the job it names does not exist, so a later
            # pass enqueues again.
            log.exception("could not enqueue job %d of %s", number, view.session_id)
            return False
        return True
