"""TurnBatchingSink: the same events in the same order, fewer writes, nothing held before a wait."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.turnevents import TurnBatchingSink, held
from daemon.bus.events import EventBase, ToolCallCompleted, TurnEnded, TurnStarted
from daemon.fakemodel import ScriptedModel, reply, text, tool
from daemon.session.runner import run_session
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit

SID = "sess_01JD000000000000000000000A"


class Batches:
    """An inner sink that keeps each write as one batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def emit(self, *events: EventBase) -> None:
        self.batches.append([e.kind for e in events])  # type: ignore[attr-defined]


def script(harness: Harness) -> list[Any]:
    reads = [reply(text(f"Turn {i}."), tool("Read", path="README.md")) for i in range(3)]

    def idle(request: Any) -> Any:  # a turn without tool calls; a steer arrives meanwhile
        harness.bus.accept(harness.session_id, "carry on")
        return reply(text("Thinking without tools."))

    advance = [reply(tool("continue_workflow", notes=NOTES)) for _ in range(2)]
    return [*reads, idle, *advance]


def run_with(harness: Harness, events: Any) -> None:
    services = harness.services(ScriptedModel(script(harness)))
    services.events = events
    assert run_session(harness.session_id, services) == "workflow_complete"


def test_same_events_in_the_same_order_in_fewer_writes(harness: Harness) -> None:
    harness.create()
    inner = Batches()
    run_with(harness, TurnBatchingSink(inner))
    flat = [kind for batch in inner.batches for kind in batch]

    harness.create()
    run_with(harness, harness.events)
    assert flat == harness.events.kinds()

    # a turn with one tool call is two writes: its model reply with the tool's start, then the
    # tool's end and turn_ended with the next turn_started (and its receipts)
    assert inner.batches[2:4] == [
        ["llm_turn_completed", "tool_call_started"],
        ["tool_call_completed", "turn_ended", "turn_started"],
    ]
    # (a receipt is written on its own, right before the request that carries it leaves; the
    # last turn's events on their own, right before the session ends)
    assert len(inner.batches) <= 2 * flat.count("turn_started") + flat.count("steer_delivered") + 3
    assert len(flat) > 2 * len(inner.batches)


def test_nothing_is_held_when_the_loop_may_wait(harness: Harness) -> None:
    harness.create()
    inner = Batches()
    run_with(harness, TurnBatchingSink(inner))
    last_turn, ending = inner.batches[-2:]  # the last turn's events, flushed before the session ends
    assert last_turn[0] == "step_advanced" and ending == ["session_completed"]
    for batch in inner.batches[:-2]:  # every other write ends with what comes right before a wait
        assert batch[-1] in {
            "session_started",
            "turn_started",
            "steer_delivered",
            "tool_call_started",
            "turn_ended",
            "session_completed",
        }, batch
    idle_end = [b for b in inner.batches[:-2] if b[-1] == "turn_ended"]
    assert len(idle_end) == 1  # the turn without tool calls, written before the idle wait


def test_held_events_and_flush() -> None:
    inner = Batches()
    sink = TurnBatchingSink(inner)
    sink.emit(ToolCallCompleted(sessionId=SID, turnId=1, toolName="Read", toolUseId="t1"))
    sink.emit(TurnEnded(sessionId=SID, turnId=1, toolCalls=1))
    assert inner.batches == []
    sink.emit(TurnStarted(sessionId=SID, turnId=2))
    assert inner.batches == [["tool_call_completed", "turn_ended", "turn_started"]]
    sink.emit(TurnEnded(sessionId=SID, turnId=2, toolCalls=0))  # idle: written at once
    assert inner.batches[-1] == ["turn_ended"]
    sink.emit(ToolCallCompleted(sessionId=SID, turnId=3, toolName="Read", toolUseId="t3"))
    sink.flush()
    sink.flush()
    assert inner.batches[-1] == ["tool_call_completed"] and len(inner.batches) == 3
    assert not held(TurnEnded(sessionId=SID, turnId=1)) and held(
        TurnEnded(sessionId=SID, turnId=1, toolCalls=2)
    )


def test_the_last_turns_events_are_written_before_the_session_reads_as_ended(harness: Harness) -> None:
    """A coordinator that sees `completed` and then reads the events finds the last
    step_advanced (the workflow e2e test once missed it: it rode with session_completed)."""
    harness.create()
    seen: list[tuple[list[str], str]] = []

    class StatusAtWrite(Batches):
        def emit(self, *events: EventBase) -> None:
            super().emit(*events)
            seen.append((self.batches[-1], harness.record().status.value))

    run_with(harness, TurnBatchingSink(StatusAtWrite()))
    last_advance = max(i for i, (kinds, _) in enumerate(seen) if "step_advanced" in kinds)
    assert seen[last_advance][1] == "running", seen
    assert seen[-1][0][-1] == "session_completed"
