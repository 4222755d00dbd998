"""The session registry's listing: pages, status filters, and expired records leaving the index."""

from __future__ import annotations

import pytest

from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.host.clock import epoch_ms
from daemon.schema.records import SessionStatus

pytestmark = pytest.mark.unit


def create(registry: SessionRegistry, n: int) -> list[str]:
    return [
        registry.create(NewSession(workflowId="wf", goal=f"goal {i}", workspacePath="/tmp", stepCount=1))
        for i in range(n)
    ]


def test_pages_are_newest_first_with_the_total(registry: SessionRegistry) -> None:
    ids = create(registry, 5)
    page, total = registry.list_sessions(limit=2, offset=1)
    assert total == 5
    assert [r.sessionId for r in page] == [ids[3], ids[2]]


def test_status_filters_read_live_and_finished_sessions(bus: SteerBus, registry: SessionRegistry) -> None:
    ids = create(registry, 3)
    channel = bus.channel(ids[0], "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")
    registry.mark_finished(ids[0], 3600)
    bus.channel(ids[1], "w1", 30).claim()
    completed, total_completed = registry.list_sessions(SessionStatus.COMPLETED)
    running, total_running = registry.list_sessions(SessionStatus.RUNNING)
    queued, _ = registry.list_sessions(SessionStatus.QUEUED)
    assert ([r.sessionId for r in completed], total_completed) == ([ids[0]], 1)
    assert ([r.sessionId for r in running], total_running) == ([ids[1]], 1)
    assert [r.sessionId for r in queued] == [ids[2]]


def test_an_expired_record_leaves_the_index_when_listed(registry: SessionRegistry) -> None:
    ids = create(registry, 3)
    registry.client.delete(registry.keys.session(ids[1]).record)  # its retention ran out
    page, total = registry.list_sessions()
    assert ([r.sessionId for r in page], total) == ([ids[2], ids[0]], 2)
    assert registry.client.zcard(registry.keys.sessions) == 2
    assert registry.client.zscore(registry.keys.active, ids[1]) is None


def test_total_count_counts_readable_sessions_only(bus: SteerBus, registry: SessionRegistry) -> None:
    """Expired sessions beyond the page read are not counted either: their index entries
    expire with their keys."""
    ids = create(registry, 5)
    for sid in ids[:3]:  # the oldest three finished; their retention has run out
        channel = bus.channel(sid, "w1", 30)
        channel.claim()
        channel.finish(SessionStatus.COMPLETED, "workflow_complete")
        registry.mark_finished(sid, 0)
        bus.client.delete(*bus.keys.session(sid).all())
    page, total = registry.list_sessions(limit=1)
    assert ([r.sessionId for r in page], total) == ([ids[4]], 2)
    assert registry.client.zcard(registry.keys.sessions) == 2
    assert registry.client.zcard(registry.keys.expiring) == 0


def test_an_index_entry_leaves_no_later_than_its_keys(registry: SessionRegistry) -> None:
    [sid] = create(registry, 1)
    registry.mark_finished(sid, 3600)
    score = registry.client.zscore(registry.keys.expiring, sid)
    assert score is not None and score <= epoch_ms() + 3600 * 1000
    assert registry.client.zscore(registry.keys.active, sid) is None
    assert registry.list_sessions()[1] == 1  # still readable: still counted
