"""The reaper: no session stays stuck, and no session gets a second job while one waits.

`decide` is pure and driven through every case; the passes run against real Redis and
fakeredis with an in-memory job queue (tests/worker/test_queueing.py checks the RQ side).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis

from daemon.bus.fleet.reaper import Action, JobState, Reaper, SessionView, decide
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.schema.records import SessionStatus

pytestmark = pytest.mark.unit


class FakeJobs:
    """The job queue as the reaper sees it: a state per job id, and what was enqueued."""

    def __init__(self) -> None:
        self.state: dict[str, JobState] = {}
        self.enqueued: list[tuple[str, int]] = []
        self.fail = False
        self.swept: list[str] = []

    def states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        return {job: self.state.get(job, JobState.GONE) for job in job_ids}

    def enqueue(self, session_id: str, number: int) -> None:
        if self.fail:
            raise redis.ConnectionError("queue unreachable")
        self.enqueued.append((session_id, number))
        self.state[session_id if number == 1 else f"{session_id}-r{number}"] = JobState.WAITING

    def sweep_taken(self, job_id: str) -> None:
        self.swept.append(job_id)


def make_session(registry: SessionRegistry) -> str:
    return registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=1))


def view(**changes: object) -> SessionView:
    base: dict[str, object] = dict(
        session_id="sess_01JD0000000000000000000000", status="running", attempt="1", jobs="1",
        job_pending=False, watched_job="", leased=False, ttl_ms=-1,
    )  # fmt: skip
    return SessionView(**{**base, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "job", "action"),
    [
        ({"status": None}, None, Action.FORGET),
        ({"status": "completed", "ttl_ms": 5000}, None, Action.RETIRE),
        ({"leased": True}, None, Action.NOTHING),
        ({"status": "queued", "leased": True, "job_pending": True}, JobState.GONE, Action.NOTHING),
        ({}, None, Action.REQUEUE),  # running, no lease, no job: the attempt died
        ({"status": "waiting"}, None, Action.REQUEUE),
        ({"job_pending": True}, JobState.WAITING, Action.NOTHING),  # a resume job waits its turn
        ({"status": "queued", "job_pending": True}, JobState.WAITING, Action.NOTHING),
        ({"status": "queued", "job_pending": True}, JobState.TAKEN, Action.WATCH),
        ({"status": "queued", "job_pending": True, "watched_job": "1"}, JobState.TAKEN, Action.REQUEUE),
        (
            {"status": "queued", "job_pending": True, "watched_job": "1", "jobs": "2"},
            JobState.TAKEN,
            Action.WATCH,
        ),
        ({"status": "queued", "job_pending": True}, JobState.GONE, Action.REQUEUE),
    ],
)
def test_decide(changes: dict[str, object], job: JobState | None, action: Action) -> None:
    assert decide(view(**changes), job) is action


def reaper_for(bus: SteerBus, registry: SessionRegistry, jobs: FakeJobs, name: str = "r1") -> Reaper:
    return Reaper(bus, registry, name, 30, jobs)


def next_pass(reaper: Reaper) -> list[str]:
    reaper.bus.client.delete(reaper.bus.keys.reaper_lock)  # as if an interval went by
    return reaper.run_once()


def test_a_dead_workers_session_gets_one_job_however_long_it_waits(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    healthy, orphan, queued = (make_session(registry) for _ in range(3))
    bus.channel(healthy, "w-alive", 30).claim()
    bus.channel(orphan, "w-dead", 30).claim()
    bus.client.delete(bus.keys.session(orphan).lease)  # the dead worker's lease lapsed
    jobs = FakeJobs()
    jobs.state[queued] = JobState.WAITING  # dispatch's job, waiting for a free worker
    reaper = reaper_for(bus, registry, jobs)
    assert reaper.run_once() == [orphan]
    assert jobs.enqueued == [(orphan, 2)]
    assert bus.client.get(bus.keys.session(orphan).lease) == "reaper:r1"
    assert reaper_for(bus, registry, jobs, "r2").run_once() == []  # the lock: one reaper an interval
    # every worker is busy: the mark expires while the job still waits in the queue
    bus.client.delete(bus.keys.session(orphan).lease)
    for _ in range(3):
        assert next_pass(reaper) == []
    assert jobs.enqueued == [(orphan, 2)]
    claim = bus.channel(orphan, "w-new", 30).claim()  # a new worker's claim takes the mark
    assert claim.attempt == 2 and claim.resumed
    assert registry.get(queued).status is SessionStatus.QUEUED


def test_a_queued_session_whose_job_is_gone_is_enqueued_again(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    sid = make_session(registry)
    jobs = FakeJobs()  # its job failed at the claim (a timeout) or was lost with Redis
    reaper = reaper_for(bus, registry, jobs)
    assert reaper.run_once() == [sid]
    assert jobs.enqueued == [(sid, 2)]
    record = bus.client.hgetall(bus.keys.session(sid).record)
    assert (record["jobs"], record["jobPending"], record["status"]) == ("2", "1", "queued")


def test_a_job_taken_but_never_claimed_is_watched_then_enqueued_again(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    sid = make_session(registry)
    jobs = FakeJobs()
    jobs.state[sid] = JobState.TAKEN  # a worker took it from the queue and died before claiming
    reaper = reaper_for(bus, registry, jobs)
    assert reaper.run_once() == []
    lease = bus.keys.session(sid).lease
    assert bus.client.get(lease) == "reaper:watch:r1"
    assert 0 < bus.client.pttl(lease) <= reaper.watch_ms
    assert next_pass(reaper) == []  # still within the watch
    bus.client.delete(lease)  # the watch ran out without a claim
    assert next_pass(reaper) == [sid]
    assert jobs.enqueued == [(sid, 2)]


def test_a_slow_worker_claims_under_the_watch(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = make_session(registry)
    jobs = FakeJobs()
    jobs.state[sid] = JobState.TAKEN
    reaper = reaper_for(bus, registry, jobs)
    reaper.run_once()
    assert bus.channel(sid, "w-slow", 30).claim().attempt == 1  # claim.lua accepts the mark
    bus.client.delete(bus.keys.reaper_lock)
    assert next_pass(reaper) == [] and jobs.enqueued == []
    assert "jobPending" not in bus.client.hgetall(bus.keys.session(sid).record)


def test_a_claim_between_the_read_and_the_act_wins(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = make_session(registry)
    jobs = FakeJobs()
    reaper = reaper_for(bus, registry, jobs)
    [seen] = reaper.read([sid])
    bus.channel(sid, "w1", 30).claim()
    assert reaper.act(seen, decide(seen, JobState.GONE)) is False
    assert jobs.enqueued == []


def test_a_failed_enqueue_is_retried_once_the_mark_expires(bus: SteerBus, registry: SessionRegistry) -> None:
    orphan = make_session(registry)
    bus.channel(orphan, "w-dead", 30).claim()
    bus.client.delete(bus.keys.session(orphan).lease)
    jobs = FakeJobs()
    jobs.fail = True
    reaper = reaper_for(bus, registry, jobs)
    assert reaper.run_once() == []
    jobs.fail = False
    bus.client.delete(bus.keys.session(orphan).lease)  # the mark expired; job 2 never existed
    assert next_pass(reaper) == [orphan]
    assert jobs.enqueued == [(orphan, 3)]


def test_index_entries_of_finished_and_vanished_sessions(bus: SteerBus, registry: SessionRegistry) -> None:
    finished, vanished, live = (make_session(registry) for _ in range(3))
    channel = bus.channel(finished, "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")  # the worker dies before mark_finished
    bus.client.delete(*bus.keys.session(vanished).all())
    jobs = FakeJobs()
    jobs.state[live] = JobState.WAITING
    reaper_for(bus, registry, jobs).run_once()
    assert registry.client.zrange(registry.keys.active, 0, -1) == [live]
    expiring = dict(bus.client.zrange(bus.keys.expiring, 0, -1, withscores=True))
    assert list(expiring) == [finished]
    assert vanished not in [r.sessionId for r in registry.list_sessions()[0]]
