"""The reaper re-enqueues sessions whose lease lapsed, once, and leaves the others alone."""

from __future__ import annotations

from daemon.bus import SteerBus
from daemon.reaper import Reaper
from daemon.records import SessionStatus
from daemon.registry import NewSession, SessionRegistry


def make_session(registry: SessionRegistry) -> str:
    return registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=1))


def test_reaper_resumes_only_orphaned_sessions_once(bus: SteerBus, registry: SessionRegistry) -> None:
    queued = make_session(registry)
    healthy = make_session(registry)
    orphan = make_session(registry)
    done = make_session(registry)
    bus.channel(healthy, "w-alive", 30).claim()
    bus.channel(orphan, "w-dead", 30).claim()
    finished = bus.channel(done, "w-alive", 30)
    finished.claim()
    finished.finish(SessionStatus.COMPLETED, "workflow_complete")
    bus.client.delete(bus.keys.session(orphan).lease)  # the dead worker's lease lapsed

    enqueued: list[str] = []
    reaper = Reaper(bus, "r1", 30, enqueued.append)
    assert reaper.run_once() == [orphan]
    assert enqueued == [orphan]
    assert bus.client.get(bus.keys.session(orphan).lease) == "reaper:r1"
    # the lock keeps a second reaper out of this interval, and the mark keeps the orphan
    # from being enqueued twice even when the lock is gone
    assert Reaper(bus, "r2", 30, enqueued.append).run_once() == []
    bus.client.delete(bus.keys.reaper_lock)
    assert reaper.run_once() == []
    # a new worker's claim accepts the reaper's mark
    claim = bus.channel(orphan, "w-new", 30).claim()
    assert claim.attempt == 2 and claim.resumed
    assert registry.get(queued).status is SessionStatus.QUEUED


def test_failed_enqueue_leaves_the_mark_to_expire(bus: SteerBus, registry: SessionRegistry) -> None:
    import redis

    orphan = make_session(registry)
    bus.channel(orphan, "w-dead", 30).claim()
    bus.client.delete(bus.keys.session(orphan).lease)

    def broken(_: str) -> None:
        raise redis.ConnectionError("queue unreachable")

    assert Reaper(bus, "r1", 30, broken).run_once() == []
