"""A turn's end in one script (daemon/schema/endcheckpoint.py): the drain stores the turn's user
message when no steer comes to join it, and the journal's promises hold (docs/durability.md)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import daemon.host.faults
from daemon.agent.model import ModelRequest
from daemon.bus.scripts import Registered
from daemon.bus.session.registry import NewSession
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.turn.messages import RESUME_NOTE, Message, ToolResultBlock
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit  # its real-Redis runs are raised by their fixtures (tests/tiers.py)


class Crash(BaseException):
    """Stands in for SIGKILL: nothing in the worker catches a BaseException."""


def crash() -> None:
    raise Crash


def scripts_run(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each bus script runs from now on."""
    counts: Counter[str] = Counter()
    run = Registered.__call__

    def counted(registered: Registered[Any], *args: Any, **kwargs: Any) -> Any:
        counts[registered.script.name] += 1
        return run(registered, *args, **kwargs)

    monkeypatch.setattr(Registered, "__call__", counted)
    return counts


def two_reads_then_advance(request: ModelRequest) -> Any:
    return reply(
        tool("Read", path="README.md"), tool("Read", path="README.md"), tool("continue_workflow", notes=NOTES)
    )


def results_of(message: Message) -> list[str]:
    return [block.tool_use_id for block in message.content if isinstance(block, ToolResultBlock)]


def test_a_turn_no_steer_joins_ends_with_one_script(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.create()
    counts = scripts_run(harness, monkeypatch)
    model = ScriptedModel(rule=two_reads_then_advance)
    assert harness.run(model) == "workflow_complete"
    # two turns of three calls: per turn the reply and the results before the 2nd and 3rd
    # call are journaled (checkpoint.lua), the last result goes with the drain, and the
    # turn's user message too (turn_ended.lua): no checkpoint after the drain
    assert (counts["checkpoint"], counts["turn_ended"]) == (2 * 3 + 1, 2), counts  # + the opening
    history = harness.history()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant", "user"]
    turn_one_end = history[2]
    assert turn_one_end.meta is None or not turn_one_end.meta.partial
    assert results_of(turn_one_end) == [use.id for use in history[1].tool_uses]
    assert model.requests[1].messages[-1] == turn_one_end  # what the next request carried


def test_a_steer_at_the_turn_end_is_checkpointed_after_the_drain_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = harness.create()

    def steered(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            harness.bus.accept(sid, "steer A")  # pending when turn 1 ends
        return two_reads_then_advance(request)

    counts = scripts_run(harness, monkeypatch)
    model = ScriptedModel(rule=steered)
    assert harness.run(model) == "workflow_complete"
    assert (counts["checkpoint"], counts["turn_ended"]) == (2 * 3 + 1 + 1, 2), counts  # + the steer's
    last = model.requests[1].messages[-1]
    assert last.texts[-1].endswith("steer A")
    assert sum(text.count("steer A") for m in harness.history() for text in m.texts) == 1


@pytest.mark.parametrize("steer", [False, True], ids=["no steer", "a steer"])
def test_killed_right_after_the_drain_the_turn_is_not_asked_again(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, steer: bool
) -> None:
    monkeypatch.setenv("WORKTRAIN_FAULTS", "1")
    monkeypatch.setattr(daemon.host.faults, "sigkill_self", crash)
    context = {"worktrainFault": {"point": "after_drain", "occurrence": 1}}
    sid = harness.session_id = harness.registry.create(
        NewSession(
            workflowId="two-step",
            goal="g",
            workspacePath=str(harness.workspace),
            stepCount=2,
            context=context,
        )
    )

    def maybe_steered(request: ModelRequest) -> Any:
        if steer and len(request.messages) == 1:
            harness.bus.accept(sid, "steer A")
        return two_reads_then_advance(request)

    first = ScriptedModel(rule=maybe_steered)
    with pytest.raises(Crash):
        harness.run(first)
    stored = harness.history()
    # the last call's result is in the journal either way: as the turn's end (no steer came)
    # or as the partial entry (a steer came: the worker checkpoints it with the steer)
    assert results_of(stored[-1]) == [use.id for use in stored[-2].tool_uses]
    assert bool(stored[-1].meta and stored[-1].meta.partial) is steer
    harness.bus.client.delete(harness.bus.keys.session(sid).lease)
    resumed = ScriptedModel(rule=maybe_steered)
    assert harness.run(resumed, worker_id="w2") == "workflow_complete"
    assert len(first.requests) + len(resumed.requests) == 2  # turn 1 was never asked again
    opening = resumed.requests[0].messages[-1]
    texts = "\n\n".join(opening.texts)
    assert results_of(opening) == [use.id for use in stored[-2].tool_uses]
    assert (RESUME_NOTE in texts) is not steer  # a finished turn resumes with the note
    assert texts.count("steer A") == (1 if steer else 0)
