"""accept.lua's pending cap (README's HTTP API rule 4), on real Redis and on fakeredis: at the cap a
steer is refused and nothing of it is recorded; steers in flight count as waiting too."""

from __future__ import annotations

import pytest

from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus, SteerOutcome

pytestmark = pytest.mark.unit


def test_the_pending_cap_refuses_without_recording(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = registry.create(NewSession(workflowId="w", goal="g", workspacePath="/tmp", stepCount=1))
    assert [bus.accept(sid, f"s{i}", max_pending=2).outcome for i in range(2)] == [SteerOutcome.ACCEPTED] * 2
    refused = bus.accept(sid, "third", client_msg_id="c3", max_pending=2)
    assert refused.outcome is SteerOutcome.TOO_MANY_PENDING_STEERS and refused.ref is None
    keys = bus.keys.session(sid)
    assert bus.client.hget(keys.record, "steerOffset") == "2"
    assert bus.client.hget(keys.dedup, "c3") is None and bus.client.xlen(keys.journal) == 2
    bus.client.lmove(keys.pending, keys.inflight, "LEFT", "RIGHT")  # taken by a turn end, not yet delivered
    assert bus.accept(sid, "third", max_pending=2).outcome is SteerOutcome.TOO_MANY_PENDING_STEERS
    bus.client.delete(keys.inflight)  # delivered
    assert bus.accept(sid, "third", client_msg_id="c3", max_pending=2).outcome is SteerOutcome.ACCEPTED
    assert bus.accept(sid, "no cap", max_pending=0).outcome is SteerOutcome.ACCEPTED
