"""The idle wait cannot strand a steer (docs/durability.md "Ambiguous failures"), and a refused attempt
stops at once (docs/durability.md "Fencing"): the real attempt on the real bus, real Redis and fakeredis.
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.bus.scripts import TAKE
from daemon.bus.session.fencing import Fenced
from daemon.fakemodel import ScriptedModel, reply, text, tool
from daemon.schema.records import SessionStatus, fold_journal
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit


def advance() -> Any:
    return tool("continue_workflow", notes=NOTES)


class Channel:
    """The real channel, with a hook before each block of the idle wait."""

    def __init__(self, inner: Any, on_wait: Any, wakes: bool = True) -> None:
        self.inner, self.on_wait, self.wakes, self.waits = inner, on_wait, wakes, 0

    def wait_for_steers(self, cursor: str, timeout_seconds: float) -> bool:
        self.waits += 1
        self.on_wait(self.waits)
        woke = bool(self.inner.wait_for_steers(cursor, timeout_seconds))
        return woke and self.wakes

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def wrap_channels(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, on_wait: Any, wakes: bool = True
) -> list[Channel]:
    wrapped: list[Channel] = []
    original = harness.bus.channel

    def channel(*args: Any) -> Any:
        wrapped.append(Channel(original(*args), on_wait, wakes))
        return wrapped[-1]

    monkeypatch.setattr(harness.bus, "channel", channel)
    return wrapped


def idle_then_done(harness: Harness) -> ScriptedModel:
    return ScriptedModel([reply(text("Waiting for you.")), reply(advance()), reply(advance())])


def assert_delivered_once(harness: Harness, model: ScriptedModel, text_: str) -> None:
    assert harness.record().status is SessionStatus.COMPLETED
    final = [t for m in model.requests[-1].messages if m.role == "user" for t in m.texts]
    assert sum(part.count(text_) for part in final) == 1
    assert [v.state for v in fold_journal(harness.bus.journal(harness.session_id))] == ["delivered"]


def test_a_steer_a_lost_take_left_in_flight_is_delivered(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The take's reply is lost after Redis ran it (the steer is in flight, the worker never
    saw it); the wait's next take answers it again."""
    sid = harness.create()
    harness.idle_wait = 5.0

    def on_wait(n: int) -> None:
        if n == 1:
            harness.bus.accept(sid, "wake up")
            keys = harness.bus.keys.session(sid)
            lost = wrapped[0].inner
            harness.bus.scripts.run(TAKE, keys, lost.fenced_args())  # reply lost
            assert harness.bus.client.llen(keys.inflight) == 1

    wrapped = wrap_channels(harness, monkeypatch, on_wait)
    model = idle_then_done(harness)
    assert harness.run(model) == "workflow_complete"
    assert model.requests[1].messages[-1].texts == ["wake up"]
    assert_delivered_once(harness, model, "wake up")


def test_a_steer_moved_in_flight_behind_the_waits_back_wakes_it(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even when the journal wake-up is missed, the heartbeat's count of steers pending or in
    flight brings in a steer something else moved in flight (as a replaced worker's BLMOVE
    used to)."""
    sid = harness.create()
    harness.idle_wait = 5.0

    def on_wait(n: int) -> None:
        if n == 1:
            harness.bus.accept(sid, "moved behind its back")
            keys = harness.bus.keys.session(sid)
            assert harness.bus.client.lmove(keys.pending, keys.inflight, "LEFT", "RIGHT") is not None

    wrapped = wrap_channels(harness, monkeypatch, on_wait, wakes=False)
    model = idle_then_done(harness)
    assert harness.run(model) == "workflow_complete"
    assert wrapped[0].waits == 1
    assert_delivered_once(harness, model, "moved behind its back")


def test_a_worker_fenced_in_the_idle_wait_stops_without_a_write(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another attempt takes the session over while this one waits idle: the wait's next
    fenced call is refused, and the attempt ends without finishing or writing anything."""
    sid = harness.create()
    harness.idle_wait = 5.0
    keys = harness.bus.keys.session(sid)

    def on_wait(n: int) -> None:
        if n == 1:  # frozen past the lease: another worker claimed
            harness.bus.client.delete(keys.lease)
            harness.bus.channel(sid, "w2", 30).claim()

    wrap_channels(harness, monkeypatch, on_wait, wakes=False)
    model = ScriptedModel([reply(text("Waiting for you."))])
    assert harness.run(model) == "fenced"
    record = harness.record()
    assert (record.status, record.attempt, record.worker) == (SessionStatus.RUNNING, 2, "w2")
    assert harness.events.kinds()[-1] != "session_completed"
    assert len(model.requests) == 1


def test_a_reply_that_comes_back_to_a_stale_attempt_runs_no_tool(harness: Harness) -> None:
    """Frozen during the model call past the lease; another worker finished the session. The
    thawed attempt runs no tool of the reply, makes no further call and writes nothing."""
    sid = harness.create()
    harness.lease_seconds = 0.3
    keys = harness.bus.keys.session(sid)
    ran: list[str] = []

    def frozen(request: ModelRequest) -> Any:
        import time

        other = harness.bus.channel(sid, "w2", 30)
        harness.bus.client.delete(keys.lease)
        other.claim()
        other.finish(SessionStatus.COMPLETED, "workflow_complete")
        time.sleep(0.25)  # past the fence's trust window: the worker must ask Redis
        ran.append("model")
        return reply(tool("Bash", command="touch ran-anyway"), advance())

    before = harness.bus.client.hgetall(keys.record)
    model = ScriptedModel([frozen])
    assert harness.run(model) == "fenced"
    assert not (harness.workspace / "ran-anyway").exists()
    after = harness.bus.client.hgetall(keys.record)
    assert after["status"] == "completed" and after["endedBy"] == "w2"
    assert before["sessionId"] == after["sessionId"] and len(model.requests) == 1
    assert "tool_call_started" not in harness.events.kinds()


def test_fenced_is_raised_not_swallowed_by_the_loop(harness: Harness) -> None:
    sid = harness.create()
    keys = harness.bus.keys.session(sid)

    def taken_over(request: ModelRequest) -> Any:
        harness.bus.client.delete(keys.lease)
        harness.bus.channel(sid, "w2", 30).claim()
        return reply(advance())

    services = harness.services(ScriptedModel([taken_over]))
    from daemon.session.runner import run_session

    assert run_session(sid, services) == "fenced"
    with pytest.raises(Fenced):
        harness.bus.channel(sid, "w1", 30, attempt=1).heartbeat()
