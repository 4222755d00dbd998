"""A question parks the session until a steer answers it (README's Sub-agents and questions): the real
attempt on the
real bus (real Redis and fakeredis) with a scripted model. The answer is the question's
tool_result — not a text block after it — delivered once, journalled delivered once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemon.bus.session.dispatch import Dispatcher, RqJobQueue
from daemon.bus.session.signals import SignalStream
from daemon.bus.session.spawns import SessionTree
from daemon.bus.streams.eventsink import EventSink
from daemon.fakemodel import ScriptedModel, reply, text, tool
from daemon.schema.records import SessionStatus, fold_journal
from daemon.session.runner import WorkerServices, run_session
from daemon.session.subagents import FleetServices
from daemon.turn.messages import ToolResultBlock
from tests.agent.conftest import CATALOG, NOTES, Harness
from tests.agent.test_idle_wait import wrap_channels
from tests.web.conftest import bytes_client

pytestmark = pytest.mark.unit

QUESTION = tool("signal_coordinator", "toolu_q1", kind="question", summary="Which port?", wait=True)
ANSWER = "Use port 8080."


def with_fleet(harness: Harness, services: WorkerServices) -> WorkerServices:
    client, keys = harness.bus.client, harness.bus.keys
    sink = EventSink(client, keys, None)
    fleet = FleetServices(
        dispatcher=Dispatcher(RqJobQueue(bytes_client(client)), keys, harness.registry, sink, 3600),
        tree=SessionTree(client, keys),
        signals=SignalStream(client, keys, harness.data_dir),
        sink=sink,
        catalog=CATALOG,
    )
    return replace(services, fleet=fleet)


def finishing() -> list[Any]:
    return [reply(tool("continue_workflow", notes=NOTES)), reply(tool("continue_workflow", notes=NOTES))]


def script() -> ScriptedModel:
    return ScriptedModel([reply(text("I must ask first."), QUESTION), *finishing()])


def the_answer_is_the_tool_result_once(harness: Harness, model: ScriptedModel) -> None:
    assert harness.record().status is SessionStatus.COMPLETED
    answered = model.requests[1].messages[-1]
    results = [b for b in answered.content if isinstance(b, ToolResultBlock)]
    asked = [use.id for use in model.requests[1].messages[-2].tool_uses]  # fresh, as the fake mints them
    assert [(r.tool_use_id, ANSWER in str(r.content), r.is_error) for r in results] == [
        (asked[0], True, False)
    ]
    assert sum(t.count(ANSWER) for m in model.requests[1].messages for t in m.texts) == 0  # not as text
    views = fold_journal(harness.bus.journal(harness.session_id) or [])
    assert [(v.state, v.deliveredTurnId) for v in views] == [("delivered", 2)]
    signals = [e for e in harness.events.events if getattr(e, "kind", "") == "coordinator_signal"]
    assert [(e.signalKind, e.summary, e.wait) for e in signals] == [("question", "Which port?", True)]


def test_the_question_waits_for_a_steer_and_gets_it_as_its_result(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.create()
    harness.idle_wait = 30.0
    seen: list[Any] = []

    def on_wait(n: int) -> None:
        if n == 1:  # parked: the record says so, and the steer arrives now
            record = harness.record()
            seen.append((record.status, record.waitingFor))
            harness.bus.accept(harness.session_id, ANSWER)

    wrap_channels(harness, monkeypatch, on_wait)
    model = script()
    assert (
        run_session(harness.session_id, with_fleet(harness, harness.services(model))) == "workflow_complete"
    )
    assert seen == [(SessionStatus.WAITING, "reply")]
    the_answer_is_the_tool_result_once(harness, model)


def test_a_steer_already_waiting_at_the_turn_end_is_the_answer(harness: Harness) -> None:
    harness.create()

    def ask_and_steer(request: Any) -> Any:
        harness.bus.accept(harness.session_id, ANSWER)  # lands during the turn: its drain takes it
        return reply(text("I must ask first."), QUESTION)

    model = ScriptedModel([ask_and_steer, *finishing()])
    assert (
        run_session(harness.session_id, with_fleet(harness, harness.services(model))) == "workflow_complete"
    )
    the_answer_is_the_tool_result_once(harness, model)


def test_without_a_reply_the_idle_limit_ends_the_session(harness: Harness) -> None:
    harness.create()
    harness.idle_wait = 0.0
    model = script()
    assert run_session(harness.session_id, with_fleet(harness, harness.services(model))) == "incomplete"
    assert len(model.requests) == 1
