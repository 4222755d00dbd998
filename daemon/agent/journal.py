"""The turn journal (docs/durability.md): resume from the journal, not from the model's memory.

A turn's reply is checkpointed (appended to the stored history, by the same fenced script
as every checkpoint: daemon/bus/lua/checkpoint.lua) before its first tool starts, and the
results of its tools so far are checkpointed as each tool ends, as one user message marked
`partial` (with the step texts continue_workflow produced and, when a signal_coordinator
call waits for its reply, that call's id). The turn's end replaces that message with the
whole one (results, step texts, steers) in the checkpoint that retires its steers.

So a stored history that ends with an assistant message, or with a partial user message
after one, is a turn whose reply was received and whose end was not: `unfinished` reads it,
and a resumed attempt finishes that turn without asking the model again. Pure: the loop
(daemon/agent/loop.py) decides when, this module what.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from daemon.turn.messages import Message, MessageMeta, ToolResultBlock, ToolUseBlock

EFFECTS_UNKNOWN = (
    "The worker running this tool stopped before it finished (a crash or a takeover); "
    "its effects are unknown: check before you repeat it."
)
# Tools a resumed attempt runs again when it cannot know whether they ran (docs/durability.md): the
# ones that only look, a Write (of the same content: daemon/tools/files.py `accept_own_write`),
# spawn_agent (idempotent on its tool_use id: the same children), continue_workflow (its
# only effect is the workflow position, written with its journaled result or not at all);
# and a signal_coordinator call that waits (`rerunnable`).
RERUNNABLE = frozenset({"Read", "Glob", "Grep", "Write", "spawn_agent", "continue_workflow"})


@dataclass(frozen=True)
class Journaled:
    """A turn whose reply is journaled and whose end is not (a resumed attempt finishes it)."""

    reply: Message
    keep: int  # history entries up to and including the reply
    results: tuple[ToolResultBlock, ...] = ()
    step_texts: tuple[str, ...] = ()
    awaiting: str | None = None  # a signal_coordinator call waiting for the coordinator's reply

    def result_of(self, use: ToolUseBlock) -> ToolResultBlock | None:
        return next((r for r in self.results if r.tool_use_id == use.id), None)


def unfinished(history: Sequence[Message]) -> Journaled | None:
    """The stored history's last turn, if its reply is journaled and its end is not."""
    if not history:
        return None
    last = history[-1]
    if last.role == "assistant":
        return None if last.meta is not None and last.meta.summary else Journaled(last, len(history))
    meta = last.meta
    if meta is None or not meta.partial or len(history) < 2 or history[-2].role != "assistant":
        return None
    results = tuple(block for block in last.content if isinstance(block, ToolResultBlock))
    return Journaled(history[-2], len(history) - 1, results, meta.steps, meta.awaiting)


def partial_message(
    results: Sequence[ToolResultBlock], step_texts: Sequence[str], awaiting: str | None
) -> Message:
    """The journal entry for a turn's tools so far (never sent to the model as it is)."""
    meta = MessageMeta(steps=tuple(step_texts), partial=True, awaiting=awaiting)
    return Message(role="user", content=tuple(results), meta=meta)


def rerunnable(use: ToolUseBlock) -> bool:
    """Whether a tool call that may have been running when its worker died is run again."""
    if use.name == "signal_coordinator":
        return bool(use.input.get("wait"))  # the wait is what matters; a progress note is not re-sent
    return use.name in RERUNNABLE


def effects_unknown(use: ToolUseBlock) -> ToolResultBlock:
    """The answer for a call that may have run and cannot safely run again (Bash, Edit, ...)."""
    return ToolResultBlock(tool_use_id=use.id, content=EFFECTS_UNKNOWN, is_error=True)
