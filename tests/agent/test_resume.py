"""A resumed attempt (docs/durability.md): history from the checkpoint, the note and the steers left in
flight appended to its last user message, every steer delivered exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.schema.records import SessionStatus, fold_journal
from daemon.turn.messages import RESUME_NOTE, Message, TextBlock
from tests.agent.conftest import NOTES, STEP1, STEP2, Harness

pytestmark = pytest.mark.unit


class Crash(BaseException):
    """The worker dies here (not an Exception: nothing in the worker catches it)."""


def advance() -> Any:
    return tool("continue_workflow", notes=NOTES)


def transcript_count(history: list[Message], needle: str) -> int:
    return sum(text.count(needle) for message in history for text in message.texts)


def lapse_lease(harness: Harness) -> None:
    harness.bus.client.delete(harness.bus.keys.session(harness.session_id).lease)


def test_crash_during_a_model_call_resumes_from_the_last_checkpoint(harness: Harness) -> None:
    sid = harness.create()

    def turn_one(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "steer A")
        return reply(advance())

    def turn_two_dies(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "steer B")
        raise Crash

    with pytest.raises(Crash):
        harness.run(ScriptedModel([turn_one, turn_two_dies]))
    assert harness.record().status == SessionStatus.RUNNING
    lapse_lease(harness)
    resumed = ScriptedModel([reply(advance())])
    assert harness.run(resumed, worker_id="w2") == "workflow_complete"

    last = resumed.requests[0].messages[-1]
    assert [b.type for b in last.content] == ["tool_result", "text", "text"]
    assert last.content[1] == TextBlock(text=f"{STEP2}\n\nsteer A")
    assert last.content[2] == TextBlock(text=f"{RESUME_NOTE}\n\nsteer B")
    [resumed_event] = harness.events.of("session_resumed")
    assert (resumed_event.fromTurn, resumed_event.worker) == (2, "w2")
    receipts = [(e.turnId, e.offsets) for e in harness.events.of("steer_delivered")]
    assert receipts == [(2, [1]), (3, [2])]
    history = harness.history()
    assert transcript_count(history, "steer A") == 1 and transcript_count(history, "steer B") == 1
    record = harness.record()
    assert (record.attempt, record.turnCount, record.status) == (2, 3, SessionStatus.COMPLETED)


class DiesAtCheckpoint:
    """The real channel, but the worker dies before its `n`-th checkpoint is written."""

    def __init__(self, inner: Any, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0

    def checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls == self.n:
            raise Crash
        self.inner.checkpoint(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_steers_drained_but_not_checkpointed_are_delivered_again_exactly_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = harness.create()
    original = harness.bus.channel
    monkeypatch.setattr(harness.bus, "channel", lambda *args: DiesAtCheckpoint(original(*args), 2))

    def turn_one(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "steer A")
        return reply(advance())

    with pytest.raises(Crash):
        harness.run(ScriptedModel([turn_one]))
    assert [s.text for s in harness.bus.pending(sid)] == ["steer A"]  # in flight, not lost
    monkeypatch.setattr(harness.bus, "channel", original)
    lapse_lease(harness)
    resumed = ScriptedModel([reply(advance()), reply(advance())])
    assert harness.run(resumed, worker_id="w2") == "workflow_complete"

    first = resumed.requests[0].messages
    assert len(first) == 1 and first[0].texts == [STEP1, f"{RESUME_NOTE}\n\nsteer A"]
    assert transcript_count(harness.history(), "steer A") == 1
    views = fold_journal(harness.bus.journal(sid))
    assert [(v.state, v.deliveredTurnId) for v in views] == [("delivered", 2)]
    assert [(e.turnId, e.offsets) for e in harness.events.of("steer_delivered")] == [(2, [1])]


def test_a_clean_hand_over_says_the_session_moved_not_that_it_was_interrupted(harness: Harness) -> None:
    from daemon.session.runner import run_session
    from daemon.turn.messages import HANDOFF_NOTE

    sid = harness.create()
    stops = iter([False, True])  # the worker is asked to stop after its first turn
    first = ScriptedModel([reply(advance())])
    assert run_session(sid, harness.services(first), stop=lambda: next(stops, True)) == "released"
    resumed = ScriptedModel([reply(advance())])
    assert harness.run(resumed, worker_id="w2") == "workflow_complete"
    texts = [text for message in resumed.requests[0].messages for text in message.texts]
    assert texts[-1] == HANDOFF_NOTE and RESUME_NOTE not in texts
    # the hand-over started a second attempt
    assert harness.record().attempt == 2
