"""The lease heartbeat thread (worker/lease.py): it outlives a lapsed lease and failed beats,
and only a refusal of its attempt stops it — and then the loop's next check stops too."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from daemon.bus.fencing import Fenced
from daemon.bus.registry import NewSession, SessionRegistry
from daemon.bus.steers import SteerBus
from worker.lease import heartbeat_for


def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_heartbeat_outlives_lapses_and_failures_and_stops_only_when_refused(
    bus: SteerBus, registry: SessionRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp"))
    channel = bus.channel(sid, "w1", 0.3)
    channel.claim()
    lease = bus.keys.session(sid).lease
    beats: list[str] = []
    real = channel.heartbeat

    def counted() -> Any:
        beats.append("beat")
        return real()

    monkeypatch.setattr(channel, "heartbeat", counted)
    with heartbeat_for(channel, 0.3) as heartbeat:
        bus.client.delete(lease)  # lapsed (a long outage); nobody claimed meanwhile
        wait_for(lambda: bus.client.get(lease) == "w1")  # taken back, not given up

        def failing() -> Any:
            beats.append("failed")
            raise redis.ConnectionError("Redis restarting")

        monkeypatch.setattr(channel, "heartbeat", failing)
        wait_for(lambda: beats.count("failed") >= 2)
        monkeypatch.setattr(channel, "heartbeat", counted)
        n = len(beats)
        wait_for(lambda: len(beats) > n + 1)  # still beating after the failures
        bus.client.delete(lease)
        bus.channel(sid, "w2", 30).claim()  # another attempt took over
        wait_for(lambda: not heartbeat._thread.is_alive())
    with pytest.raises(Fenced) as refused:
        channel.guard()  # the loop's next check: no Redis round trip needed
    assert refused.value.reason == "stale_attempt"
