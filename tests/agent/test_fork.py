"""Forks in one process (README's "Fork a session", SPEC 3.12): a session run by the real runner
and loop with a scripted model, forked through the real `Forker` on the real bus (Redis
and fakeredis), the fork run by the runner. Judged by what the fork's model was sent.

The end-to-end forms (worktree snapshots, real processes, the HTTP route, kill -9) are
tests/e2e/test_forks_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.bus.session.dispatch import Dispatcher, RqJobQueue
from daemon.bus.session.forks import ForkStore, fork_summaries
from daemon.bus.streams.eventsink import EventSink
from daemon.fakemodel import ScriptedModel, reply, text, tool
from daemon.forking.fork import Forker, ForkRefused, ForkRequest
from daemon.schema.events import TurnStarted
from daemon.schema.records import SessionStatus, fold_journal
from daemon.turn.messages import Message, ToolResultBlock
from daemon.workflows.agentconfig import AgentConfig
from tests.agent.conftest import CATALOG, NOTES, STEP2, Harness
from tests.web.conftest import bytes_client

pytestmark = pytest.mark.processes

STEER = "Read the README again before you move on."


def forker(harness: Harness) -> Forker:
    client, keys = harness.bus.client, harness.bus.keys
    sink = EventSink(client, keys, None)
    dispatcher = Dispatcher(RqJobQueue(bytes_client(client)), keys, harness.registry, sink, 3600)
    return Forker(ForkStore(harness.bus, harness.registry, sink), dispatcher, CATALOG)


def four_turns() -> ScriptedModel:
    """Turn 1 reads, turn 2 runs a command and moves to step 2, turn 3 reads, turn 4 finishes."""
    return ScriptedModel(
        [
            reply(text("Looking."), tool("Read", path="README.md")),
            reply(
                text("Checking."),
                tool("Bash", command="echo checked"),
                tool("continue_workflow", notes=NOTES),
            ),
            reply(text("Step two."), tool("Read", path="README.md")),
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )


def wire(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.wire() for m in messages]


def test_a_fork_carries_the_sources_turns_then_its_steer_and_asks_once_per_own_turn(harness: Harness) -> None:
    source = harness.create()
    model = four_turns()
    assert harness.run(model) == "workflow_complete"
    forked = forker(harness).fork(ForkRequest(source=source, turn=2, steer=STEER))
    assert (forked.fork_of.sessionId, forked.fork_of.turn, forked.conversation_only) == (source, 2, True)
    fork = harness.registry.get(forked.session_id)
    assert fork is not None and fork.status is SessionStatus.QUEUED and fork.turnCount == 2
    assert fork.stepId == "write" and fork.stepIndex == 1  # the position after turn 2: step 2

    harness.session_id = forked.session_id
    fork_model = ScriptedModel([reply(tool("continue_workflow", notes=NOTES))])
    assert harness.run(fork_model, worker_id="w2") == "workflow_complete"
    assert len(fork_model.requests) == 1  # turns 1-2 were not asked again; its turn 3 once
    first = fork_model.requests[0].messages
    source_turn3 = model.requests[2].messages  # what the source's turn 3 was sent
    print("fork's first request:", [m.role for m in first], first[-1].content)
    assert wire(first[:-1]) == wire(source_turn3[:-1])  # turns 1-2, verbatim (tool ids included)
    results = [b for b in first[-1].content if isinstance(b, ToolResultBlock)]
    assert results == [b for b in source_turn3[-1].content if isinstance(b, ToolResultBlock)]
    assert first[-1].texts == [f"{STEP2}\n\n{STEER}"]  # turn 2's step text, then the steer
    record = harness.registry.get(forked.session_id)
    assert record is not None and record.turnCount == 3
    assert [f.sessionId for f in fork_summaries(harness.bus.client, harness.registry, source)] == [
        forked.session_id
    ]
    again = harness.registry.get(source)
    assert again is not None and again.turnCount == 4 and again.status is SessionStatus.COMPLETED


def test_a_fork_of_a_fork_and_with_another_model(harness: Harness) -> None:
    source = harness.create()
    assert harness.run(four_turns()) == "workflow_complete"
    forks = forker(harness)
    first = forks.fork(ForkRequest(source=source, turn=3, steer="first fork"))
    harness.session_id = first.session_id
    fork_model = ScriptedModel(
        [reply(tool("Read", path="README.md")), reply(tool("continue_workflow", notes=NOTES))]
    )
    assert harness.run(fork_model, worker_id="w2") == "workflow_complete"
    # the fork's turn 4 is its own; a fork of the fork from turn 4 carries 1-3 (copied) and 4
    second = forks.fork(
        ForkRequest(
            source=first.session_id, turn=4, steer="second fork", agent=AgentConfig(model="claude-other")
        )
    )
    record = harness.registry.get(second.session_id)
    assert (
        record is not None and record.agentConfig is not None and record.agentConfig.model == "claude-other"
    )
    harness.session_id = second.session_id
    again = ScriptedModel([reply(tool("continue_workflow", notes=NOTES))])
    assert harness.run(again, worker_id="w3") == "workflow_complete"
    sent = again.requests[0].messages
    assert wire(sent[:-1]) == wire(fork_model.requests[1].messages[:-1])
    assert sent[-1].texts == ["second fork"]


@pytest.mark.parametrize(
    ("turn", "steer", "status", "code"),
    [(9, "x", 400, "unknown_turn"), (4, "x", 400, "invalid_request")],
)
def test_what_a_source_refuses(harness: Harness, turn: int, steer: str, status: int, code: str) -> None:
    source = harness.create()
    assert harness.run(four_turns()) == "workflow_complete"
    with pytest.raises(ForkRefused) as refused:
        forker(harness).fork(ForkRequest(source=source, turn=turn, steer=steer))
    print(refused.value.message)
    assert (refused.value.status, refused.value.code) == (status, code)


def test_a_source_without_a_journal_of_its_turns_answers_409(harness: Harness) -> None:
    source = harness.create()
    assert harness.run(four_turns()) == "workflow_complete"
    harness.bus.client.delete(harness.bus.keys.turns_of(source))  # as a session from before forks
    with pytest.raises(ForkRefused) as refused:
        forker(harness).fork(ForkRequest(source=source, turn=2))
    assert (refused.value.status, refused.value.code) == (409, "journal_gone")


def test_a_turn_without_a_tool_call_needs_a_steer(harness: Harness) -> None:
    source = harness.create()

    def idle_then_finish(request: ModelRequest) -> Any:
        return reply(text("Nothing to do?"))

    model = ScriptedModel([idle_then_finish])
    harness.idle_wait = 0.0
    harness.run(model)  # turn 1 ends without a tool call; no steer comes: incomplete
    with pytest.raises(ForkRefused) as refused:
        forker(harness).fork(ForkRequest(source=source, turn=1))
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    forked = forker(harness).fork(ForkRequest(source=source, turn=1, steer="Do step one now."))
    harness.session_id = forked.session_id
    fork_model = ScriptedModel(
        [reply(tool("continue_workflow", notes=NOTES)), reply(tool("continue_workflow", notes=NOTES))]
    )
    assert harness.run(fork_model, worker_id="w2") == "workflow_complete"
    sent = fork_model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "user"] and sent[-1].texts == ["Do step one now."]


def test_a_fork_of_a_turn_without_a_tool_call_reads_its_steer_in_its_first_own_turn(harness: Harness) -> None:
    """The copied history ends with the source's reply (the turn asked for no tool), a turn
    that ended: the fork starts `Forked`, not as a journaled turn to finish. Its first own
    turn (2) asks the model with the steer and receives it; no turn without a model call."""
    source = harness.create()
    harness.idle_wait = 0.0
    harness.run(ScriptedModel([reply(text("Nothing to do?"))]))  # turn 1, no tool, no steer came
    forked = forker(harness).fork(ForkRequest(source=source, turn=1, steer="Do step one now."))
    harness.session_id = forked.session_id
    fork_model = ScriptedModel(
        [reply(tool("continue_workflow", notes=NOTES)), reply(tool("continue_workflow", notes=NOTES))]
    )
    assert harness.run(fork_model, worker_id="w2") == "workflow_complete"
    record = harness.registry.get(forked.session_id)
    [steer] = fold_journal(harness.bus.journal(forked.session_id) or [])
    started = [
        e.turnId
        for e in harness.events.events
        if isinstance(e, TurnStarted) and e.sessionId == forked.session_id
    ]
    print(
        "fork's turns:",
        started,
        "steer delivered to turn",
        steer.deliveredTurnId,
        "requests",
        len(fork_model.requests),
    )
    assert record is not None and record.turnCount == 3 and started == [2, 3]
    assert (steer.state, steer.deliveredTurnId) == ("delivered", 2)
