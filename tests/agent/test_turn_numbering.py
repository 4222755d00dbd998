"""One turn numbering (README's Console, SPEC 3.6 v5; issue 45 item 1): every message of the
conversation API carries the turn id the record, the events and the steer journal use — also
after a resume, where a turn that died mid-call left no reply and the ids have a gap that a
console counting assistant messages would close (it showed turns 1-2 where the record said 3)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.bus.session.conversation import numbered_conversation, read_conversation
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.schema.records import fold_journal
from daemon.turn.messages import Message, MessageMeta, TextBlock
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit


class Crash(BaseException):
    """The worker dies here (nothing in the worker catches a BaseException)."""


def test_after_a_resume_the_conversation_numbers_turns_as_the_record_events_and_journal_do(
    harness: Harness,
) -> None:
    sid = harness.create()

    def turn_one(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "steer A")  # delivered to turn 2
        return reply(tool("continue_workflow", notes=NOTES))

    def turn_two_dies(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "steer B")  # turn 2 never answers: delivered to turn 3
        raise Crash

    with pytest.raises(Crash):
        harness.run(ScriptedModel([turn_one, turn_two_dies]))
    harness.bus.client.delete(harness.bus.keys.session(sid).lease)
    resumed = ScriptedModel([reply(tool("continue_workflow", notes=NOTES))])
    assert harness.run(resumed, worker_id="w2") == "workflow_complete"

    messages = read_conversation(harness.bus.client, harness.bus.keys, sid)
    replies = [m.turnId for m in messages if m.role == "assistant"]
    answered = [e.turnId for e in harness.events.of("llm_turn_completed")]
    print("assistant turns", replies, "events", answered, "turnCount", harness.record().turnCount)
    assert replies == answered == [1, 3]  # turn 2 died before its reply: a gap, not a renumbering
    assert harness.record().turnCount == 3
    # each user message: the first turn that read it (the last one is read by no turn)
    assert [(m.role, m.turnId) for m in messages] == [
        ("user", 1),
        ("assistant", 1),
        ("user", 2),
        ("assistant", 3),
        ("user", None),
    ]
    journal = {v.offset: v.deliveredTurnId for v in fold_journal(harness.bus.journal(sid) or [])}
    steers = [(s.offset, s.text, s.turnId) for m in messages for s in m.steers]
    assert (
        steers
        == [(1, "steer A", journal[1]), (2, "steer B", journal[2])]
        == [
            (1, "steer A", 2),
            (2, "steer B", 3),
        ]
    )


def test_a_checkpoint_from_before_the_ids_is_numbered_by_counting() -> None:
    """Histories written before the ids (the retention period's worth) read as they used to."""
    history = [
        Message(role="user", content=(TextBlock(text="step one"),), meta=MessageMeta(steps=("step one",))),
        Message(role="assistant", content=(TextBlock(text="a"),)),
        Message(role="user", content=(TextBlock(text="steer"),), meta=MessageMeta(steers=("steer",))),
        Message(role="assistant", content=(TextBlock(text="b"),)),
    ]
    messages = numbered_conversation(history, [])
    assert [m.turnId for m in messages] == [1, 1, 2, 2]
    assert [(s.offset, s.text, s.turnId) for s in messages[2].steers] == [(None, "steer", 2)]


def test_a_compaction_summary_has_no_turn_and_the_kept_turns_keep_theirs() -> None:
    history = [
        Message(role="user", content=(TextBlock(text="step"),), meta=MessageMeta(turn=1)),
        Message(role="assistant", content=(TextBlock(text="summary"),), meta=MessageMeta(summary=True)),
        Message(role="user", content=(TextBlock(text="note"),), meta=MessageMeta(turn=9)),
        Message(role="assistant", content=(TextBlock(text="kept"),), meta=MessageMeta(turn=7)),
        Message(role="user", content=(TextBlock(text="more"),), meta=MessageMeta(turn=8)),
        Message(role="assistant", content=(TextBlock(text="live"),), meta=MessageMeta(turn=9)),
    ]
    assert [m.turnId for m in numbered_conversation(history, [])] == [1, None, 9, 7, 8, 9]
