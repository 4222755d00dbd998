"""The agent loop with a scripted model (no HTTP): delivery, limits, cancel, idle wait, endings.

Every test runs the real attempt (`daemon.session.runner.run_session`: claim, first message, loop,
finish) on the real bus, over real Redis and fakeredis.
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.loop import Limits, limit_reached
from daemon.agent.model import ModelRequest
from daemon.fakemodel import FakeError, ScriptedModel, reply, text, tool
from daemon.schema.records import SessionStatus, fold_journal
from daemon.turn.messages import TextBlock, ToolResultBlock
from daemon.workflows import WorkflowLimits
from tests.agent.conftest import NOTES, STEP1, STEP2, Harness, workflow_with

pytestmark = pytest.mark.unit


def advance(tool_id: str | None = None) -> Any:
    return tool("continue_workflow", tool_id=tool_id, notes=NOTES)


def test_two_step_workflow_completes_with_a_typed_transcript(harness: Harness) -> None:
    sid = harness.create()
    model = ScriptedModel(
        [reply(text("Looking."), tool("Read", path="README.md"), advance()), reply(advance())]
    )
    assert harness.run(model) == "workflow_complete"
    record = harness.record()
    assert (record.status, record.outcome, record.turnCount, record.stepIndex) == (
        SessionStatus.COMPLETED,
        "workflow_complete",
        2,
        2,
    )
    history = harness.history()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant", "user"]
    assert history[0].texts == [STEP1]
    assert "# Demo project" in history[2].content[0].content  # the Read result
    kinds = harness.events.kinds()
    assert kinds[0] == "session_started" and kinds[-1] == "session_completed"
    assert kinds.count("turn_started") == 2 and kinds.count("step_advanced") == 2
    assert harness.events.of("session_completed")[0].outcome == "workflow_complete"
    assert harness.registry.client.zscore(harness.registry.keys.active, sid) is None


def test_steers_sent_before_the_first_turn_follow_the_first_step_prompt(harness: Harness) -> None:
    sid = harness.create()
    harness.bus.accept(sid, "early one")
    harness.bus.accept(sid, "early two")
    model = ScriptedModel([reply(advance()), reply(advance())])
    harness.run(model)
    first = model.requests[0].messages
    assert len(first) == 1 and first[0].texts == [f"{STEP1}\n\nearly one\n\nearly two"]
    [receipt] = harness.events.of("steer_delivered")
    assert (receipt.turnId, receipt.offsets) == (1, [1, 2])


class LateSteerChannel:
    """Wraps the real channel: a steer arrives after the attempt is set up, just before turn 1."""

    def __init__(self, inner: Any, before_first_turn: Any) -> None:
        self.inner, self.before_first_turn = inner, before_first_turn

    def start_turn(self, expected: int | None = None, drain: bool = False, announce: Any = None) -> Any:
        if drain:
            self.before_first_turn()
        return self.inner.start_turn(expected, drain, announce)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_steer_sent_after_set_up_but_before_turn_one_reaches_turn_one(
    harness: Harness, monkeypatch: Any
) -> None:
    sid = harness.create()
    harness.bus.accept(sid, "before the claim")
    original = harness.bus.channel

    def channel(*args: Any) -> Any:
        return LateSteerChannel(original(*args), lambda: harness.bus.accept(sid, "just in time"))

    monkeypatch.setattr(harness.bus, "channel", channel)
    model = ScriptedModel([reply(advance()), reply(advance())])
    assert harness.run(model) == "workflow_complete"
    first = model.requests[0].messages
    assert len(first) == 1 and first[0].texts == [f"{STEP1}\n\nbefore the claim\n\njust in time"]
    [receipt] = harness.events.of("steer_delivered")
    assert (receipt.turnId, receipt.offsets) == (1, [1, 2])


def test_steers_of_one_turn_arrive_batched_after_the_tool_results_step_text_first(harness: Harness) -> None:
    sid = harness.create()

    def turn_one(request: ModelRequest) -> Any:
        assert harness.bus.accept(sid, "steer A", expected_turn_id=1).ref.turnId == 1
        harness.bus.accept(sid, "steer B")
        return reply(tool("Read", path="README.md", tool_id="t-read"), advance("t-adv"))

    model = ScriptedModel([turn_one, reply(advance())])
    assert harness.run(model) == "workflow_complete"
    last = model.requests[1].messages[-1]
    assert last.role == "user"
    assert [type(b) for b in last.content] == [ToolResultBlock, ToolResultBlock, TextBlock]
    asked = [use.id for use in model.requests[1].messages[-2].tool_uses]  # the fake's fresh ids
    assert [b.tool_use_id for b in last.content[:2]] == asked  # type: ignore[union-attr]
    assert last.content[2].text == f"{STEP2}\n\nsteer A\n\nsteer B"  # type: ignore[union-attr]
    [receipt] = harness.events.of("steer_delivered")
    assert (receipt.turnId, receipt.offsets) == (2, [1, 2])
    views = fold_journal(harness.bus.journal(sid))
    assert [(v.state, v.deliveredTurnId) for v in views] == [("delivered", 2), ("delivered", 2)]


def test_a_turn_without_tool_calls_gets_the_steers_as_its_own_user_message(harness: Harness) -> None:
    sid = harness.create()

    def thinking_aloud(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "please continue")
        return reply(text("Should I go on?"))

    model = ScriptedModel([thinking_aloud, reply(advance()), reply(advance())])
    assert harness.run(model) == "workflow_complete"
    second = model.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "user"]
    assert [(b.type, b.text) for b in second[-1].content] == [("text", "please continue")]  # type: ignore[union-attr]


def test_steers_after_the_final_turn_are_never_delivered_but_recorded_undelivered(harness: Harness) -> None:
    sid = harness.create()

    def last_turn(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "too late")
        return reply(advance())

    model = ScriptedModel([reply(advance()), last_turn])
    assert harness.run(model) == "workflow_complete"
    assert len(model.requests) == 2
    assert all("too late" not in str(m) for m in harness.history())
    [undelivered] = harness.events.of("steer_undelivered")
    assert undelivered.offsets == [1]
    assert harness.events.kinds()[-2:] == ["steer_undelivered", "session_completed"]
    assert [v.state for v in fold_journal(harness.bus.journal(sid))] == ["undelivered"]


class StearingChannel:
    """Wraps the real channel: a steer is sent while the agent waits idle."""

    def __init__(self, inner: Any, on_wait: Any) -> None:
        self.inner, self.on_wait, self.waits = inner, on_wait, 0

    def wait_for_steers(self, cursor: str, timeout_seconds: float) -> bool:
        self.waits += 1
        self.on_wait()
        return bool(self.inner.wait_for_steers(cursor, timeout_seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_idle_wait_is_woken_by_a_steer_which_starts_the_next_turn(harness: Harness, monkeypatch: Any) -> None:
    sid = harness.create()
    harness.idle_wait = 5.0
    wrapped: list[StearingChannel] = []
    original = harness.bus.channel

    def channel(*args: Any) -> Any:
        wrapped.append(StearingChannel(original(*args), lambda: harness.bus.accept(sid, "wake up")))
        return wrapped[-1]

    monkeypatch.setattr(harness.bus, "channel", channel)
    statuses: list[SessionStatus] = []

    def idle(request: ModelRequest) -> Any:
        return reply(text("I am done thinking."))

    def after(request: ModelRequest) -> Any:
        statuses.append(harness.record().status)
        return reply(advance())

    model = ScriptedModel([idle, after, reply(advance())])
    assert harness.run(model) == "workflow_complete"
    assert wrapped[0].waits == 1
    assert statuses == [SessionStatus.RUNNING]
    assert model.requests[1].messages[-1].texts == ["wake up"]
    assert model.requests[1].messages[-2].texts == ["I am done thinking."]
    assert harness.events.of("steer_delivered")[0].turnId == 2


def test_idle_wait_without_a_steer_ends_incomplete_keeping_the_reply(harness: Harness) -> None:
    harness.create()
    harness.idle_wait = 0.2
    model = ScriptedModel([reply(text("I give up."))])
    assert harness.run(model) == "incomplete"
    record = harness.record()
    assert (record.status, record.outcome) == (SessionStatus.FAILED, "incomplete")
    assert harness.history()[-1].texts == ["I give up."]


def test_max_turns_is_checked_before_each_model_call(harness: Harness) -> None:
    workflow = workflow_with(WorkflowLimits(maxTurns=2))
    harness.create("limited")
    model = ScriptedModel(rule=lambda request: reply(tool("Read", path="README.md")))
    assert harness.run(model, extra=workflow) == "max_turns"
    assert len(model.requests) == 2
    assert harness.record().outcome == "max_turns"


def test_wall_clock_limit(harness: Harness) -> None:
    workflow = workflow_with(WorkflowLimits(maxWallClockSeconds=250, stallSeconds=10_000))
    harness.create("limited")

    def slow(request: ModelRequest) -> Any:
        harness.clock.advance(100)
        return reply(tool("Read", path="README.md"))

    model = ScriptedModel(rule=slow)
    assert harness.run(model, extra=workflow) == "max_wall_clock"
    assert len(model.requests) == 3


def test_stall_limit_counts_time_without_progress(harness: Harness) -> None:
    workflow = workflow_with(WorkflowLimits(stallSeconds=120))
    harness.create("limited")

    def failing(request: ModelRequest) -> Any:
        harness.clock.advance(50)
        return reply(tool("NoSuchTool"))

    def working(request: ModelRequest) -> Any:
        harness.clock.advance(50)
        return reply(tool("Read", path="README.md"))

    # three working turns (progress each time), then failing ones: 50 s each without progress
    model = ScriptedModel([working, working, working], rule=failing)
    assert harness.run(model, extra=workflow) == "stalled"
    assert len(model.requests) == 3 + 3


def test_limit_reached_order_and_thresholds() -> None:
    limits = Limits(max_turns=5, max_wall_clock_seconds=60, stall_seconds=30)
    assert limit_reached(limits, 4, 59.9, 29.9) is None
    assert limit_reached(limits, 5, 0, 0).outcome == "max_turns"  # type: ignore[union-attr]
    assert limit_reached(limits, 0, 60, 0).outcome == "max_wall_clock"  # type: ignore[union-attr]
    assert limit_reached(limits, 0, 0, 30).outcome == "stalled"  # type: ignore[union-attr]


def test_cancel_stops_at_the_next_turn_boundary(harness: Harness) -> None:
    sid = harness.create()

    def cancelled_mid_call(request: ModelRequest) -> Any:
        assert harness.bus.cancel(sid)[0] == "requested"
        return reply(tool("Write", path="out.txt", content="written anyway"), advance())

    model = ScriptedModel([cancelled_mid_call])
    assert harness.run(model) == "cancelled"
    assert len(model.requests) == 1
    assert (harness.workspace / "out.txt").read_text() == "written anyway"  # the turn finished
    record = harness.record()
    assert (record.status, record.outcome) == (SessionStatus.CANCELLED, "cancelled")
    assert [m.role for m in harness.history()] == ["user", "assistant", "user"]


def test_a_steer_checkpointed_for_a_turn_that_never_starts_is_undelivered(harness: Harness) -> None:
    sid = harness.create()

    def steered_then_cancelled(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "too late to matter")
        assert harness.bus.cancel(sid)[0] == "requested"
        return reply(tool("Read", path="README.md"))

    model = ScriptedModel([steered_then_cancelled])
    assert harness.run(model) == "cancelled"
    # the turn end drained it into the checkpoint, but no model call ever received it
    assert "too late to matter" in harness.history()[-1].texts[-1]
    assert harness.events.of("steer_delivered") == []
    [undelivered] = harness.events.of("steer_undelivered")
    assert undelivered.offsets == [1]
    assert [v.state for v in fold_journal(harness.bus.journal(sid))] == ["undelivered"]


def test_a_final_model_error_fails_the_session_with_the_reason(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel([FakeError(401, "authentication_error", "invalid x-api-key")])
    assert harness.run(model) == "model_error"
    [done] = harness.events.of("session_completed")
    assert (done.status, done.outcome) == ("failed", "model_error")
    assert "authentication_error" in done.detail and "invalid x-api-key" in done.detail
    assert len(model.requests) == 1 and harness.events.of("model_retry") == []


def test_a_malformed_tool_call_is_an_error_result_not_a_crash(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel(
        [
            reply(tool("continue_workflow", notes="too short"), tool("Read", wrong="field"), tool("Nope")),
            reply(advance()),
            reply(advance()),
        ]
    )
    assert harness.run(model) == "workflow_complete"
    results = model.requests[1].messages[-1].content
    assert all(isinstance(b, ToolResultBlock) and b.is_error for b in results)
    assert "notes" in results[0].content and "at least 50" in results[0].content  # type: ignore[union-attr]
    assert "path" in results[1].content  # type: ignore[union-attr]
    assert "Unknown tool 'Nope'" in results[2].content  # type: ignore[union-attr]
    assert len(harness.events.of("tool_call_failed")) == 3


def test_fatal_issue_ends_the_session_after_continue_workflow(harness: Harness) -> None:
    harness.create()
    fatal = tool("report_issue", kind="blocked", severity="fatal", summary="No network")
    model = ScriptedModel([reply(fatal), reply(advance())])
    assert harness.run(model) == "fatal_issue"
    assert "continue_workflow" in model.requests[1].messages[-1].content[0].content  # type: ignore[union-attr]
    record = harness.record()
    assert (record.status, record.outcome, record.stepIndex) == (SessionStatus.FAILED, "fatal_issue", 0)


def test_missing_workspace_fails_before_any_model_call(harness: Harness, tmp_path: Any) -> None:
    harness.create(workspace=tmp_path / "not-here")
    model = ScriptedModel([])
    assert harness.run(model) == "workspace_not_found"
    assert model.requests == []
    assert harness.record().outcome == "workspace_not_found"


def test_a_second_job_for_a_held_session_leaves_it_alone(harness: Harness) -> None:
    sid = harness.create()
    harness.bus.channel(sid, "other-worker", 30).claim()
    model = ScriptedModel([])
    assert harness.run(model, worker_id="w2") == "skipped"
    assert harness.record().worker == "other-worker" and harness.record().status == SessionStatus.RUNNING


def test_the_same_tool_calls_three_turns_in_a_row_emit_agent_stuck(harness: Harness) -> None:
    harness.create()
    same = [reply(tool("Read", path="README.md")) for _ in range(4)]
    model = ScriptedModel([*same, reply(advance()), reply(advance())])
    assert harness.run(model) == "workflow_complete"
    [stuck] = harness.events.of("agent_stuck")
    assert stuck.turnId == 3 and "Read" in stuck.reason


def test_a_stop_request_hands_the_session_over_at_the_turn_boundary(harness: Harness) -> None:
    sid = harness.create()
    from daemon.session.runner import run_session

    calls: list[int] = []
    model = ScriptedModel([reply(advance())])
    outcome = run_session(sid, harness.services(model), stop=lambda: (calls.append(1), len(calls) > 1)[1])
    assert outcome == "released"
    assert len(model.requests) == 1
    record = harness.record()
    assert record.status == SessionStatus.RUNNING and record.stepIndex == 1
    assert harness.bus.client.get(harness.bus.keys.session(sid).lease) == "reaper:w1"


@pytest.mark.redis
def test_report_issue_with_both_sinks_failing_never_fails_the_session(
    harness: Harness, tmp_path: Any
) -> None:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from daemon.bus.streams.issues import IssueSink
    from daemon.session.runner import run_session

    sid = harness.create()
    not_a_dir = tmp_path / "data-is-a-file"
    not_a_dir.write_text("")
    down = redis.Redis(port=9, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    issue = tool("report_issue", kind="tool_failure", severity="error", summary="disk and Redis are gone")
    model = ScriptedModel([reply(issue, advance()), reply(advance())])
    services = harness.services(model)
    services.issues = IssueSink(down, harness.bus.keys, not_a_dir)
    assert run_session(sid, services) == "workflow_complete"
    result = model.requests[1].messages[-1].content[0]
    assert isinstance(result, ToolResultBlock) and not result.is_error
    assert result.content.startswith("Issue recorded (severity=error).")
    assert len(harness.events.of("issue_reported")) == 1
