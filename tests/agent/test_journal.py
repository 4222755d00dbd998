"""The turn journal's pure reading (daemon/agent/journal.py, docs/durability.md)."""

from __future__ import annotations

import pytest

from daemon.agent.journal import EFFECTS_UNKNOWN, effects_unknown, partial_message, rerunnable, unfinished
from daemon.turn.messages import Message, MessageMeta, TextBlock, ToolResultBlock, ToolUseBlock, parse_message

pytestmark = pytest.mark.unit

FIRST = Message(role="user", content=(TextBlock(text="Step 1"),))
READ = ToolUseBlock(id="toolu_01a", name="Read", input={"path": "a"})
BASH = ToolUseBlock(id="toolu_01b", name="Bash", input={"command": "make"})
REPLY = Message(role="assistant", content=(TextBlock(text="Looking."), READ, BASH))
READ_RESULT = ToolResultBlock(tool_use_id=READ.id, content="a's text")


def test_a_history_ending_with_a_reply_is_a_turn_to_finish() -> None:
    journaled = unfinished([FIRST, REPLY])
    assert journaled is not None and journaled.reply == REPLY and journaled.keep == 2
    assert journaled.results == () and journaled.awaiting is None


def test_a_partial_message_round_trips_through_the_checkpoint_and_is_read_back() -> None:
    partial = parse_message(partial_message([READ_RESULT], ["Step 2"], "toolu_01q").to_json())
    journaled = unfinished([FIRST, REPLY, partial])
    assert journaled is not None and journaled.keep == 2
    assert journaled.results == (READ_RESULT,) and journaled.step_texts == ("Step 2",)
    assert journaled.awaiting == "toolu_01q"
    assert journaled.result_of(READ) == READ_RESULT and journaled.result_of(BASH) is None


def test_a_finished_turn_or_a_summary_is_nothing_to_finish() -> None:
    done = Message(role="user", content=(READ_RESULT,))
    assert unfinished([FIRST, REPLY, done]) is None
    assert unfinished([FIRST]) is None and unfinished([]) is None
    summary = Message(
        role="assistant", content=(TextBlock(text="older turns"),), meta=MessageMeta(summary=True)
    )
    assert unfinished([FIRST, summary]) is None


def test_what_runs_again_and_what_is_answered_effects_unknown() -> None:
    assert rerunnable(READ) and rerunnable(ToolUseBlock(id="w", name="Write", input={}))
    assert rerunnable(ToolUseBlock(id="s", name="spawn_agent", input={}))
    assert rerunnable(ToolUseBlock(id="q", name="signal_coordinator", input={"wait": True}))
    assert not rerunnable(ToolUseBlock(id="p", name="signal_coordinator", input={"kind": "progress"}))
    assert not rerunnable(BASH) and not rerunnable(ToolUseBlock(id="e", name="Edit", input={}))
    answer = effects_unknown(BASH)
    assert (answer.tool_use_id, answer.content, answer.is_error) == (BASH.id, EFFECTS_UNKNOWN, True)


def test_a_checkpointed_message_without_journal_fields_keeps_its_old_form() -> None:
    meta = MessageMeta(steps=("Step 2",))
    assert "partial" not in Message(role="user", content=(READ_RESULT,), meta=meta).to_json()
