"""Compaction in the loop (docs/DEVELOPING.md): a session longer than its window completes.

The real attempt on the real bus, with a scripted model that imitates the window: a
request of more than `max_prompt_tokens` is answered 400 "prompt is too long", and usage is
reported as the API reports it with prompt caching (input_tokens alone is a handful).
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest, Usage
from daemon.agent.modelcall import CallSettings
from daemon.fakemodel import FakeError, ScriptedModel, reply, summarising, text, tool
from daemon.fakemodel.script import request_tokens
from daemon.session.runner import run_session
from daemon.workflows import Workflow, WorkflowLimits, WorkflowStep
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit

WINDOW = 20_000
STEPS = 4
TURNS_PER_STEP = 10


def step_prompt(i: int) -> str:
    return f"<step {i} of {STEPS}: read big.txt again and again, then move on>"


WORKFLOW = Workflow(
    id="long-reader",
    name="Long reader",
    steps=tuple(
        WorkflowStep(id=f"s{i}", title=f"Step {i}", prompt=step_prompt(i)) for i in range(1, STEPS + 1)
    ),
    limits=WorkflowLimits(maxTurns=200),
)


def current_step(request: ModelRequest) -> int:
    """The step the request is in: the latest step prompt it carries."""
    said = " ".join(t for m in request.messages if m.role == "user" for t in m.texts)
    return max(i for i in range(1, STEPS + 1) if step_prompt(i) in said)


def reader(turns_per_step: int = TURNS_PER_STEP) -> Any:
    """Reads big.txt every turn; continues the workflow every `turns_per_step`-th turn of a step."""
    answered: dict[int, int] = {}

    def rule(request: ModelRequest) -> ModelReply:
        step = current_step(request)
        answered[step] = answered.get(step, 0) + 1
        if answered[step] >= turns_per_step:
            return reply(
                text(f"[s{step}] done"), tool("Read", path="big.txt"), tool("continue_workflow", notes=NOTES)
            )
        return reply(text(f"[s{step}] reading"), tool("Read", path="big.txt"))

    return rule


def user_text(request: ModelRequest) -> str:
    return "\n".join(t for m in request.messages if m.role == "user" for t in m.texts)


def assert_current_step_and_its_steers_once(requests: list[ModelRequest], steers: list[str]) -> None:
    """Every request carries its step's prompt once, and once a steer reached a step, every
    later request of that step carries it once (docs/DEVELOPING.md: verbatim, exactly once)."""
    step_of: dict[str, int] = {}
    for request in requests:
        said, step = user_text(request), current_step(request)
        assert said.count(step_prompt(step)) == 1, said
        for steer in steers:
            seen = said.count(steer)
            assert seen <= 1, (steer, said)
            if seen:
                step_of.setdefault(steer, step)
            if step_of.get(steer) == step:
                assert seen == 1, (steer, said)
    assert len(step_of) == len(steers)  # every steer was delivered


def long_session(harness: Harness) -> str:
    (harness.workspace / "big.txt").write_text(("A line of a six-kilobyte file. " * 3 + "\n") * 64)
    return harness.create(WORKFLOW.id)


def window_settings(**kwargs: Any) -> CallSettings:
    return CallSettings(context_tokens=WINDOW, **kwargs)


def tool_requests(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.tools]


def test_a_session_four_times_its_window_completes_by_compacting(harness: Harness) -> None:
    sid = long_session(harness)
    said: list[str] = []

    def coordinator(request: ModelRequest) -> Any:
        if request.tools and len(model.requests) % 7 == 0:  # a steer now and then, mid-turn
            said.append(f"<steer {len(said) + 1}: keep it short>")
            harness.bus.accept(sid, said[-1])
        return read(request)

    read = summarising(reader())
    model = ScriptedModel(rule=coordinator, max_prompt_tokens=WINDOW)
    assert harness.run(model, extra=WORKFLOW, calls=window_settings()) == "workflow_complete"
    requests = tool_requests(model)
    assert len(requests) == STEPS * TURNS_PER_STEP
    assert_current_step_and_its_steers_once(requests, said)
    assert max(request_tokens(r) for r in requests) <= WINDOW  # the estimate kept every one inside
    compactions = harness.events.of("context_compacted")
    assert len(compactions) >= 5 and all(c.afterTokens < c.beforeTokens for c in compactions)
    assert all(c.summary == "model" and c.turnsSummarized >= 1 for c in compactions)
    assert len(model.requests) == len(requests) + len(compactions)  # one summary call each
    assert all(not r.tools for r in model.requests if r not in requests)
    record = harness.record()
    assert record.compactions == len(compactions)
    assert len(harness.history()) < 30  # 40 turns are 81 messages uncompacted
    assert record.inputTokens + record.cacheReadTokens + record.cacheWriteTokens > 40 * 10_000


def test_a_too_long_prompt_compacts_to_half_the_window_and_is_sent_once_more(harness: Harness) -> None:
    """A model that reports only input_tokens (as if the caller ignored the cache fields)
    keeps the estimate low, so the window is only found out by the API's 400."""
    long_session(harness)
    inner = ScriptedModel(rule=summarising(reader()), max_prompt_tokens=WINDOW)

    class UnderReporting:
        requests = inner.requests

        def complete(self, request: ModelRequest, interrupt: object = None) -> ModelReply:
            answer = inner.complete(request)
            return ModelReply(answer.content, answer.stop_reason, Usage(1, 1))

    model = UnderReporting()
    assert harness.run(model, extra=WORKFLOW, calls=window_settings()) == "workflow_complete"  # type: ignore[arg-type]
    sizes = [request_tokens(r) for r in inner.requests if r.tools]
    over = [i for i, size in enumerate(sizes) if size > WINDOW]
    assert over, "the test needs the window to be hit"
    assert all(sizes[i + 1] <= WINDOW // 2 + 1000 for i in over)  # never twice in a row: half after
    compacted = harness.events.of("context_compacted")
    assert len(compacted) == len(over) and all(c.beforeTokens > WINDOW for c in compacted)


def test_a_prompt_still_too_long_after_compacting_is_a_context_overflow(harness: Harness) -> None:
    sid = long_session(harness)
    # 90,000 characters in lines Read returns whole (it cuts a line beyond MAX_LINE_BYTES)
    (harness.workspace / "huge.txt").write_text(("x" * 899 + "\n") * 100)
    model = ScriptedModel(
        [reply(tool("Read", path="big.txt")), reply(tool("Read", path="huge.txt"))],
        rule=summarising(reader()),
        max_prompt_tokens=WINDOW,
    )
    assert harness.run(model, extra=WORKFLOW, calls=window_settings(compact_at=1.0)) == "context_overflow"
    [done] = harness.events.of("session_completed")
    assert (done.status, done.outcome) == ("failed", "context_overflow") and "too long" in done.detail
    assert sid and len([r for r in model.requests if r.tools and request_tokens(r) > WINDOW]) == 2


def test_a_failed_summary_call_falls_back_to_a_digest(harness: Harness) -> None:
    long_session(harness)
    read = reader()

    def no_summaries(request: ModelRequest) -> Any:
        return FakeError(500, "api_error", "no summaries today") if not request.tools else read(request)

    model = ScriptedModel(rule=no_summaries, max_prompt_tokens=WINDOW)
    assert harness.run(model, extra=WORKFLOW, calls=window_settings()) == "workflow_complete"
    compactions = harness.events.of("context_compacted")
    assert compactions and all(c.summary == "digest" for c in compactions)
    assert "mechanical digest" in harness.history()[1].texts[0]


def test_a_resumed_session_carries_on_compacted(harness: Harness) -> None:
    sid = long_session(harness)
    stopping: list[bool] = []
    read = summarising(reader())

    def stop_after_two_compactions(request: ModelRequest) -> Any:
        if len(harness.events.of("context_compacted")) >= 2:
            stopping.append(True)
        return read(request)

    first = ScriptedModel(rule=stop_after_two_compactions, max_prompt_tokens=WINDOW)
    services = harness.services(first, extra=WORKFLOW, calls=window_settings())
    assert run_session(sid, services, stop=lambda: bool(stopping)) == "released"
    stored = harness.history()
    assert stored[1].meta is not None and stored[1].meta.summary  # the checkpoint is compacted
    second = ScriptedModel(rule=summarising(reader()), max_prompt_tokens=WINDOW)
    services = harness.services(second, worker_id="w2", extra=WORKFLOW, calls=window_settings())
    assert run_session(sid, services) == "workflow_complete"
    opening = second.requests[0]
    assert request_tokens(opening) <= WINDOW and opening.messages[1].texts == stored[1].texts
    assert harness.record().compactions == len(harness.events.of("context_compacted"))
