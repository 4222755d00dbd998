"""A history cut at a turn's end (pure; README's "Fork a session"); the fork's first turn
opens it with daemon/turn/messages.py `fork_opening`.

The history list holds every message with its turn id (daemon/turn/messages.py `numbered`):
an assistant message is the turn whose call wrote it; a user message the first turn whose
request carried it. Turn N's end is its reply and its tool results; the user message after
it also carries what the NEXT turn read first — a step a steer released, the steers — so a
fork keeps only the tool results and the step texts turn N itself produced (`steps`, from
its turn mark), and delivers its own steer there instead:

    source:  ... [assistant N] [user: results N, steps N, steers read by N+1]   [assistant N+1] ...
    fork:    ... [assistant N] [user: results N, steps N, the fork's steer]     [its turn N+1]

Everything before is kept verbatim (thinking blocks with their signatures, tool ids), which
is what the API requires of a continued conversation.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.turn.messages import Message, MessageMeta, ToolResultBlock, turn_end_message


class TurnNotInHistory(Exception):
    """The turn's messages are not (verbatim) in the history: `compacted` says whether a
    compaction summarised them, else the history lacks them (gone, or from before ids)."""

    def __init__(self, message: str, compacted: bool) -> None:
        super().__init__(message)
        self.compacted = compacted


def _turn(message: Message) -> int | None:
    return message.meta.turn if message.meta is not None else None


def history_through(history: Sequence[Message], turn: int, steps: int) -> list[Message]:
    """The history through the end of `turn`: every message up to its reply, verbatim, then
    its tool results and its own `steps` step texts as one user message (none when the turn
    asked for no tool and advanced no step). TurnNotInHistory when that cannot be had."""
    replies = [
        i
        for i, m in enumerate(history)
        if m.role == "assistant" and _turn(m) == turn and not (m.meta and m.meta.summary)
    ]
    compacted = any(m.meta is not None and m.meta.summary for m in history)
    if not replies:
        why = "was compacted into a summary" if compacted else "is not in the checkpointed history"
        raise TurnNotInHistory(f"turn {turn}'s reply {why}", compacted)
    index = replies[-1]
    kept = list(history[: index + 1])
    later = next((m for m in kept if (_turn(m) or 0) > turn), None)
    if later is not None:  # a compaction at a later turn rewrote what came before this one
        why = f"the history before turn {turn} was compacted at turn {_turn(later)}"
        raise TurnNotInHistory(f"{why}: fork from that turn or a later one", True)
    after = history[index + 1] if index + 1 < len(history) and history[index + 1].role == "user" else None
    results = [b for b in after.content if isinstance(b, ToolResultBlock)] if after is not None else []
    answered = {r.tool_use_id for r in results}
    if any(use.id not in answered for use in history[index].tool_uses):
        raise TurnNotInHistory(f"turn {turn}'s tool results are not in the checkpointed history", False)
    own_steps = list(after.meta.steps[:steps]) if after is not None and after.meta is not None else []
    end = turn_end_message(results, own_steps, [])
    if end is not None:
        kept.append(
            end.model_copy(update={"meta": (end.meta or MessageMeta()).model_copy(update={"turn": turn + 1})})
        )
    return [_own(m) for m in kept]


def _own(message: Message) -> Message:
    """A copied message without the source's steer offsets (the fork's journal has its own)."""
    meta = message.meta
    if meta is None or not meta.steerOffsets:
        return message
    return message.model_copy(update={"meta": meta.model_copy(update={"steerOffsets": ()})})
