"""API weather in the loop (docs/DEVELOPING.md): retries, their waits, and what a waiting turn still does.

The real attempt (daemon.session.runner.run_session) on the real bus, with a scripted model and a
fake clock (every wait passes at once, and is recorded).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.agent.modelcall import CallSettings
from daemon.agent.waiting import CHECK_SECONDS
from daemon.fakemodel import (
    FakeError,
    ScriptedModel,
    overloaded,
    rate_limited,
    reply,
    text,
    tool,
    unavailable,
)
from daemon.session.runner import run_session
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit


def advance() -> Any:
    return tool("continue_workflow", notes=NOTES)


def calls(**kwargs: Any) -> CallSettings:
    return CallSettings(rng=random.Random(7), **kwargs)


def test_a_turn_rides_out_529_529_429_503_and_honours_retry_after(harness: Harness) -> None:
    harness.create()
    weather = [overloaded(), overloaded(retry_after=2), rate_limited(retry_after=3), unavailable()]
    model = ScriptedModel([*weather, reply(text("at last"), advance()), reply(advance())])
    assert harness.run(model, calls=calls()) == "workflow_complete"
    retries = harness.events.of("model_retry")
    assert [(r.turnId, r.status, r.attempt) for r in retries] == [
        (1, 529, 1),
        (1, 529, 2),
        (1, 429, 3),
        (1, 503, 4),
    ]
    assert retries[1].waitSeconds == 2.0 and retries[2].waitSeconds == 3.0
    assert 0 <= retries[0].waitSeconds <= 1.0 and 0 <= retries[3].waitSeconds <= 8.0  # full jitter
    assert sum(harness.clock.slept) == pytest.approx(sum(r.waitSeconds for r in retries), abs=0.01)
    assert "overloaded_error" in retries[0].error
    assert len(model.requests) == 6 and harness.events.kinds().count("turn_started") == 2
    assert all(request.messages == model.requests[0].messages for request in model.requests[:5])


def test_an_overload_mid_stream_is_retried(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel([overloaded(midstream=True), reply(advance()), reply(advance())])
    assert harness.run(model, calls=calls()) == "workflow_complete"
    [retry] = harness.events.of("model_retry")
    assert (retry.status, retry.attempt) == (529, 1)


def test_retries_end_when_the_turns_budget_is_spent(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel([overloaded(retry_after=40)] * 100)
    assert harness.run(model, calls=calls(retry_seconds=100)) == "model_error"
    assert len(model.requests) == 3  # waits of 40 + 40; a third would pass 100 s
    [done] = harness.events.of("session_completed")
    assert "529" in done.detail and "3 call(s)" in done.detail
    assert harness.record().waitingFor is None


def test_timeouts_that_never_end_are_a_stall(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel([FakeError(0, "stalled", "silent")] * 50)
    assert harness.run(model, calls=calls(retry_seconds=30)) == "stalled"
    assert all(r.status is None for r in harness.events.of("model_retry"))


def test_a_plain_400_fails_at_once(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel([FakeError(400, "invalid_request_error", "messages: roles must alternate")])
    assert harness.run(model, calls=calls()) == "model_error"
    assert len(model.requests) == 1 and harness.clock.slept == []


def test_retries_off_fails_at_the_first_failure(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel([overloaded()])
    assert harness.run(model, calls=calls(retry_seconds=0)) == "model_error"
    assert len(model.requests) == 1


def test_a_steer_accepted_during_the_wait_is_delivered_once_at_the_turns_end(harness: Harness) -> None:
    sid = harness.create()
    accepted: list[Any] = []

    def steer_mid_wait(seconds: float) -> None:
        if not accepted:
            record = harness.record()
            assert (record.turnId, record.waitingFor) == (1, "model_retry")  # the turn is live
            accepted.append(harness.bus.accept(sid, "use the staging server", expected_turn_id=1))

    harness.clock.on_sleep = steer_mid_wait
    model = ScriptedModel([rate_limited(retry_after=5), reply(text("on it"), advance()), reply(advance())])
    assert harness.run(model, calls=calls()) == "workflow_complete"
    assert accepted[0].outcome == "accepted"
    texts = [t for r in model.requests for m in r.messages if m.role == "user" for t in m.texts]
    assert sum(t.count("use the staging server") for t in model.requests[-1].messages[-1].texts) == 1
    assert "use the staging server" not in " ".join(model.requests[1].messages[-1].texts)  # the retried call
    assert any("use the staging server" in t for t in texts)
    [receipt] = harness.events.of("steer_delivered")
    assert (receipt.turnId, receipt.offsets) == (2, [1])


def test_a_cancel_during_the_wait_ends_the_session_within_a_check(harness: Harness) -> None:
    sid = harness.create()
    waited: list[float] = []

    def cancel_once(seconds: float) -> None:
        waited.append(seconds)
        if len(waited) == 1:
            harness.bus.cancel(sid)

    harness.clock.on_sleep = cancel_once
    model = ScriptedModel([overloaded(retry_after=300)])
    assert harness.run(model, calls=calls()) == "cancelled"
    assert sum(waited) <= CHECK_SECONDS  # noticed at the next check, not after the 300 s
    assert harness.record().status == "cancelled" and harness.record().waitingFor is None


def test_a_stopping_worker_hands_the_session_over_mid_wait(harness: Harness) -> None:
    sid = harness.create()
    stopping: list[bool] = []
    harness.clock.on_sleep = lambda seconds: stopping.append(True)
    model = ScriptedModel([overloaded(retry_after=300)])
    outcome = run_session(sid, harness.services(model, calls=calls()), stop=lambda: bool(stopping))
    assert outcome == "released"
    record = harness.record()
    assert (record.status, record.turnId, record.waitingFor) == ("running", 0, None)
    resumed = ScriptedModel([reply(advance()), reply(advance())])
    assert run_session(sid, harness.services(resumed, worker_id="w2")) == "workflow_complete"


def test_usage_sums_every_call_of_every_attempt(harness: Harness) -> None:
    sid = harness.create()

    def stop_after_turn_one(request: ModelRequest) -> Any:
        stopping.append(True)
        return reply(text("one"), advance())

    stopping: list[bool] = []
    model = ScriptedModel([stop_after_turn_one])
    assert run_session(sid, harness.services(model), stop=lambda: bool(stopping)) == "released"
    assert harness.record().inputTokens == 10 and harness.record().outputTokens == 5
    resumed = ScriptedModel([overloaded(), reply(advance())])
    assert run_session(sid, harness.services(resumed, worker_id="w2", calls=calls())) == "workflow_complete"
    record = harness.record()
    assert (record.inputTokens, record.outputTokens) == (20, 10)  # two replies; the 529 used none
    [first, second] = harness.events.of("llm_turn_completed")
    assert first.text == "one" and second.text == ""
