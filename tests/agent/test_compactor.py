"""The compactor (daemon/agent/compactor.py): what a compacted history keeps, on synthetic histories."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.agent import compactor
from daemon.turn.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    first_message,
    parse_message,
    turn_end_message,
)

pytestmark = pytest.mark.unit


def prompt(step: int) -> str:
    return f"<step {step} prompt: read the files and report>"


def steer_text(n: int) -> str:
    return f"<steer {n}: mind the tests>"


@dataclass
class Session:
    """A history built turn by turn, with the truth about the current step on the side."""

    history: list[Message] = field(default_factory=list)
    step: int = 1
    step_steers: list[str] = field(default_factory=list)  # delivered during the current step
    turns: int = 0
    steers: int = 0

    def __post_init__(self) -> None:
        self.history.append(first_message(prompt(1), []))

    def turn(self, advance: bool = False, steer: bool = False, size: int = 400) -> None:
        self.turns += 1
        use = ToolUseBlock(id=f"toolu_{self.turns}", name="Read", input={"path": f"f{self.turns}.txt"})
        self.history.append(Message(role="assistant", content=(TextBlock(text=f"turn {self.turns}"), use)))
        steps, steers = [], []
        if advance:
            self.step += 1
            self.step_steers = []
            steps.append(prompt(self.step))
        if steer:
            self.steers += 1
            steers.append(steer_text(self.steers))
            self.step_steers.append(steers[-1])
        result = ToolResultBlock(tool_use_id=use.id, content="x" * size)
        message = turn_end_message([result], steps, steers)
        assert message is not None
        self.history.append(message)

    def compact(self, budget: int, summary: str = "the summary") -> compactor.Plan | None:
        plan = compactor.plan(self.history, budget, prompt(self.step), compactor.message_tokens)
        if plan is not None:
            self.history = compactor.compacted(plan, summary)
        return plan

    def user_text(self) -> str:
        return "\n".join(t for m in self.history if m.role == "user" for t in m.texts)


def assert_well_formed(history: list[Message]) -> None:
    roles = [m.role for m in history]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles)), roles
    results = {b.tool_use_id for m in history for b in m.content if isinstance(b, ToolResultBlock)}
    uses = {u.id for m in history for u in m.tool_uses}
    assert uses == results  # no tool_use without its result, nor a result without its call


def assert_current_step_kept_once(s: Session) -> None:
    said = s.user_text()
    assert said.count(prompt(s.step)) == 1, said
    for text in s.step_steers:
        assert said.count(text) == 1, (text, said)


def test_the_newest_whole_turns_that_fit_are_kept_and_the_rest_summarised() -> None:
    s = Session()
    for _ in range(10):
        s.turn()
    per_turn = sum(compactor.message_tokens(m) for m in s.history[1:3])
    plan = s.compact(budget=3 * per_turn + 5)
    assert plan is not None and plan.turns == 7 and len(plan.kept) == 6
    assert s.history[0].texts == [prompt(1)]
    assert s.history[1].role == "assistant" and s.history[1].texts == ["the summary"]
    assert s.history[1].meta is not None and s.history[1].meta.summary
    assert "7 earlier turn(s)" in s.history[2].texts[0]
    assert [m.texts[0] for m in s.history[3::2]] == ["turn 8", "turn 9", "turn 10"]
    assert_well_formed(s.history)
    assert_current_step_kept_once(s)


def test_the_newest_turn_is_kept_even_when_it_alone_is_over_the_budget() -> None:
    s = Session()
    s.turn()
    s.turn(size=10_000)
    plan = s.compact(budget=10)
    assert plan is not None and plan.turns == 1 and len(plan.kept) == 2
    assert_well_formed(s.history)


def test_nothing_to_summarise_is_no_plan() -> None:
    s = Session()
    s.turn()
    assert s.compact(budget=0) is None  # one turn: it is the newest, always kept
    for _ in range(3):
        s.turn()
    assert s.compact(budget=10**6) is None  # everything fits


def test_the_current_steps_prompt_and_steers_survive_verbatim_and_once() -> None:
    s = Session()
    s.turn(steer=True)  # a steer of step 1: summarised with step 1
    s.turn(advance=True, steer=True)  # step 2 starts; a steer in the same message belongs to it
    s.turn(steer=True)
    for _ in range(6):
        s.turn()
    s.turn(steer=True)  # in the kept tail: stays where it is
    plan = s.compact(budget=3 * 150)
    assert plan is not None and plan.step_prompt == prompt(2)
    assert plan.step_steers == (steer_text(2), steer_text(3))
    assert_current_step_kept_once(s)
    assert steer_text(1) not in s.user_text()
    assert_well_formed(s.history)


def test_a_second_compaction_carries_the_current_step_again() -> None:
    s = Session()
    s.turn(advance=True, steer=True)
    for _ in range(8):
        s.turn()
    s.compact(budget=2 * 150, summary="first summary")
    for _ in range(8):
        s.turn(steer=s.turns % 3 == 0)
    plan = s.compact(budget=2 * 150, summary="second summary")
    assert plan is not None
    assert_current_step_kept_once(s)
    assert "first summary" not in " ".join(t for m in s.history for t in m.texts)
    assert s.history[1].texts == ["second summary"]
    request = compactor.summary_request(plan, 20_000, 500)
    assert "Summary of even earlier turns: first summary" in request.messages[0].texts[0]
    assert_well_formed(s.history)


def test_when_the_first_step_is_current_the_opening_keeps_its_prompt() -> None:
    s = Session()
    s.turn(steer=True)
    for _ in range(6):
        s.turn()
    plan = s.compact(budget=2 * 150)
    assert plan is not None and plan.step_prompt is None and plan.step_steers == (steer_text(1),)
    assert_current_step_kept_once(s)


def test_a_history_without_metadata_keeps_the_current_prompt_by_its_text() -> None:
    s = Session()
    s.turn(advance=True)
    for _ in range(6):
        s.turn()
    old = [parse_message(m.model_dump_json(exclude={"meta"})) for m in s.history]  # as stored before
    plan = compactor.plan(old, 2 * 150, prompt(2), compactor.message_tokens)
    assert plan is not None and plan.step_prompt == prompt(2)


def test_the_summary_request_has_no_tools_and_fits() -> None:
    s = Session()
    for _ in range(40):
        s.turn(size=5000)
    plan = compactor.plan(s.history, 1000, prompt(1), compactor.message_tokens)
    assert plan is not None
    request = compactor.summary_request(plan, 20_000, 800)
    assert request.tools == () and request.max_tokens == 800 and len(request.messages) == 1
    body = request.messages[0].texts[0]
    assert len(body) < 20_000 + 5_000 and "characters cut" in body
    assert prompt(1) in body and "[turn 1] you called Read" in body
    assert body.endswith(compactor.SUMMARY_INSTRUCTION)


def test_the_digest_lists_the_tool_calls() -> None:
    s = Session()
    for _ in range(5):
        s.turn()
    plan = compactor.plan(s.history, 150, prompt(1), compactor.message_tokens)
    assert plan is not None
    text = compactor.digest(plan, 10_000)
    assert "mechanical digest of 4 earlier turn(s)" in text
    assert '- turn 1: Read {"path": "f1.txt"} -> ok' in text


@settings(max_examples=150, deadline=None)
@given(
    script=st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(50, 3000)), min_size=1, max_size=60),
    budget=st.integers(0, 4000),
    every=st.integers(1, 12),
)
def test_any_session_compacted_any_number_of_times_keeps_its_current_step(
    script: list[tuple[bool, bool, int]], budget: int, every: int
) -> None:
    s = Session()
    for i, (advance, steer, size) in enumerate(script, 1):
        s.turn(advance=advance and i % 4 == 0, steer=steer, size=size)
        if i % every == 0:
            s.compact(budget)
            assert_well_formed(s.history)
            assert_current_step_kept_once(s)
    s.compact(budget)
    assert_well_formed(s.history)
    assert_current_step_kept_once(s)
    stored = [parse_message(m.to_json()) for m in s.history]  # a checkpoint keeps the metadata
    assert stored == s.history
