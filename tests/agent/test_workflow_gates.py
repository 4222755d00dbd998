"""`"gates": "steer"` (docs/workflows.md) in the agent loop: a step whose requireConfirmation holds
waits for a steer; the next step's text is held back and delivered with it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.bus.session.registry import NewSession
from daemon.fakemodel import ScriptedModel, reply, text, tool
from daemon.tools.base import CONFIRMED_LAST_STEP, WorkflowCursor
from daemon.turn.messages import ToolResultBlock
from daemon.workflows import Workflow, compile_workflow
from tests.agent.conftest import NOTES, Harness
from tests.agent.test_loop import StearingChannel

pytestmark = pytest.mark.unit

GATED = Workflow.model_validate(
    {
        "id": "gated",
        "name": "Gated",
        "steps": [
            {"id": "draft", "title": "Draft", "prompt": "Draft it."},
            {"id": "ship", "title": "Ship", "prompt": "Ship it.", "requireConfirmation": True},
            {"id": "announce", "title": "Announce", "prompt": "Announce it."},
        ],
    }
)
LAST_GATED = GATED.model_copy(update={"id": "last-gated", "steps": GATED.steps[:2]})


def advance() -> Any:
    return reply(tool("continue_workflow", notes=NOTES))


def create(harness: Harness, workflow: Workflow, gates: str = "steer") -> str:
    harness.session_id = harness.registry.create(
        NewSession(workflowId=workflow.id, goal="g", workspacePath=str(harness.workspace), gates=gates)  # type: ignore[arg-type]
    )
    return harness.session_id


def results(request: ModelRequest) -> list[dict[str, Any]]:
    blocks = [b for b in request.messages[-1].content if isinstance(b, ToolResultBlock)]
    return [{**json.loads(b.content), "is_error": b.is_error} for b in blocks]


def steer_while_waiting(harness: Harness, monkeypatch: Any, sid: str, steer: str, seen: list[Any]) -> None:
    original = harness.bus.channel

    def on_wait() -> None:
        seen.append(harness.record().waitingFor)
        harness.bus.accept(sid, steer)

    monkeypatch.setattr(harness.bus, "channel", lambda *a: StearingChannel(original(*a), on_wait))


def test_the_step_after_a_confirmation_comes_with_the_steer(harness: Harness, monkeypatch: Any) -> None:
    sid = create(harness, GATED)
    harness.idle_wait = 5.0
    waiting_for: list[Any] = []
    steer_while_waiting(harness, monkeypatch, sid, "Approved, announce it.", waiting_for)
    model = ScriptedModel([advance(), advance(), advance(), reply(text("Waiting.")), advance()])
    assert harness.run(model, extra=GATED) == "workflow_complete"
    [gate] = results(model.requests[2])
    assert (gate["status"], gate["gateKind"], gate["is_error"]) == (
        "awaiting_confirmation",
        "coordinator_eval",
        False,
    )
    assert model.requests[2].messages[-1].texts == []  # the next step is held back
    [again] = results(model.requests[3])  # continue_workflow while waiting is refused
    assert (again["status"], again["is_error"]) == ("awaiting_confirmation", True)
    assert waiting_for == ["confirmation"]
    assert model.requests[4].messages[-1].texts == ["Announce it.\n\nApproved, announce it."]
    record = harness.record()
    assert (record.waitingFor, record.stepIndex, record.stepCount) == (None, 3, 3)


def test_a_steer_drained_at_the_gate_turn_end_releases_the_step_at_once(harness: Harness) -> None:
    sid = create(harness, GATED)

    def gate_turn(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "Go.")
        return advance()

    model = ScriptedModel([advance(), gate_turn, advance()])
    assert harness.run(model, extra=GATED) == "workflow_complete"
    last = model.requests[2].messages[-1]
    assert [r["status"] for r in results(model.requests[2])] == ["awaiting_confirmation"]
    assert last.texts == ["Announce it.\n\nGo."]


def test_a_confirmed_last_step_finishes_on_the_next_continue(harness: Harness, monkeypatch: Any) -> None:
    sid = create(harness, LAST_GATED)
    harness.idle_wait = 5.0
    steer_while_waiting(harness, monkeypatch, sid, "Looks good.", [])
    model = ScriptedModel([advance(), advance(), reply(text("Waiting.")), advance()])
    assert harness.run(model, extra=LAST_GATED) == "workflow_complete"
    assert model.requests[3].messages[-1].texts == [f"{CONFIRMED_LAST_STEP}\n\nLooks good."]


def test_gates_skip_runs_through(harness: Harness) -> None:
    create(harness, GATED, gates="skip")
    model = ScriptedModel([advance(), advance(), advance()])
    assert harness.run(model, extra=GATED) == "workflow_complete"
    assert model.requests[2].messages[-1].texts == ["Announce it."]


def test_the_wait_survives_a_resume() -> None:
    program = compile_workflow(GATED)
    cursor = WorkflowCursor.restore(program, None, {"goal": "g"}, gates="steer")
    cursor.awaiting_confirmation = True
    saved = cursor.fields()
    assert saved["waitingFor"] == "confirmation"
    resumed = WorkflowCursor.restore(program, str(saved["workflowState"]), {}, gates="steer")
    assert resumed.awaiting_confirmation and not resumed.complete
    assert resumed.release_held() == ["Draft it."] and resumed.release_held() == []
