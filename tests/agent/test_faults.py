"""Fault injection (daemon.host.faults): off by default, armed only on attempt 1 under the env gate;
a worker killed at any point resumes with every steer delivered exactly once."""

from __future__ import annotations

from typing import Any

import pytest

import daemon.host.faults
from daemon.agent.model import ModelRequest
from daemon.bus.session.registry import NewSession
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.host.faults import POINTS, FaultPlan, plan_for
from daemon.schema.records import SessionStatus, fold_journal
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit

FAULT = {"worktrainFault": {"point": "after_drain", "occurrence": 2}}


class Crash(BaseException):
    """Stands in for SIGKILL: nothing in the worker catches a BaseException."""


def crash() -> None:
    raise Crash


def test_plan_only_under_the_gate_on_attempt_one() -> None:
    on = {"WORKTRAIN_FAULTS": "1"}
    assert plan_for(FAULT, 1, environ={}) is None
    assert plan_for(FAULT, 1, environ={"WORKTRAIN_FAULTS": "0"}) is None
    assert plan_for(FAULT, 2, environ=on) is None
    assert plan_for({"other": 1}, 1, environ=on) is None
    assert plan_for({"worktrainFault": {"point": "nowhere"}}, 1, environ=on) is None
    plan = plan_for(FAULT, 1, environ=on)
    assert plan is not None and (plan.point, plan.occurrence) == ("after_drain", 2)


def test_the_plan_fires_at_the_nth_pass_of_its_point_only() -> None:
    fired: list[int] = []
    plan = FaultPlan("in_tool", 2, kill=lambda: fired.append(1))
    for name in ("before_turn", "in_tool", "after_drain", "in_tool", "in_tool"):
        plan.hit(name)
    assert fired == [1]


def advance(request: ModelRequest) -> Any:
    return reply(tool("Read", path="README.md"), tool("continue_workflow", notes=NOTES))


# a worktree fork's first placement: tests/e2e/test_forks_e2e.py kills there
@pytest.mark.parametrize("point", [p for p in POINTS if p not in ("before_claim", "fork_pinned")])
@pytest.mark.parametrize("occurrence", [1, 2])
def test_killed_at_any_point_the_resumed_session_has_each_steer_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, point: str, occurrence: int
) -> None:
    monkeypatch.setenv("WORKTRAIN_FAULTS", "1")
    monkeypatch.setattr(daemon.host.faults, "sigkill_self", crash)
    context = {"worktrainFault": {"point": point, "occurrence": occurrence}}
    sid = harness.session_id = harness.registry.create(
        NewSession(
            workflowId="two-step",
            goal="g",
            workspacePath=str(harness.workspace),
            stepCount=2,
            context=context,
        )
    )
    sent = iter(range(1, 100))

    def steered(request: ModelRequest) -> Any:  # a steer arrives during every model call
        harness.bus.accept(sid, f"steer #{next(sent)}")
        return advance(request)

    first = ScriptedModel(rule=steered)
    if point == "after_checkpoint" and occurrence == 2:
        # two steps: the second turn completes the workflow, so there is no second pass
        assert harness.run(first) == "workflow_complete"
        return
    with pytest.raises(Crash):
        harness.run(first)
    harness.bus.client.delete(harness.bus.keys.session(sid).lease)  # the dead worker's lease lapsed
    resumed = ScriptedModel(rule=steered)
    assert harness.run(resumed, worker_id="w2") == "workflow_complete"

    record = harness.record()
    assert (record.status, record.attempt) == (SessionStatus.COMPLETED, 2)
    assert len(harness.events.of("session_resumed")) == 1
    views = fold_journal(harness.bus.journal(sid))
    requests = [*first.requests, *resumed.requests]
    final = "\n".join(t for m in requests[-1].messages if m.role == "user" for t in m.texts)
    for view in views:
        expected = 1 if view.state == "delivered" else 0
        assert final.count(f"{view.text}\n") + final.endswith(view.text) == expected, (view, final)
    delivered = [v.text for v in views if v.state == "delivered"]
    assert [final.index(t) for t in delivered] == sorted(final.index(t) for t in delivered)
    assert all(v.state in ("delivered", "undelivered") for v in views)
