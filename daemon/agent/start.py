"""How an attempt starts (README's HTTP API, docs/durability.md): the runner restores what the
last checkpoint stored and says, with one of these values passed to `run_agent`, how the
attempt's first turn takes it up.

- `Fresh`: no checkpoint (also when an earlier attempt died before writing one): the first
  turn opens with the first step's prompt, then every steer accepted so far.
- `Resumed(note)`: the checkpoint's last turn ended, or was cut before its reply: the first
  turn's request is the checkpointed one with the note (RESUME_NOTE after a crash,
  HANDOFF_NOTE after a clean hand-over) and the steers drained but never checkpointed
  appended to its last user message.
- `Forked`: a fork before its first turn of its own: its copied history (daemon/forking/history.py),
  with its steer where the source's turn end had its own, no note.
- `Journaled` (daemon/agent/journal.py): the checkpoint's last turn has its reply journaled
  and no end: the first turn finishes it from the journal, without a model call, and its
  end delivers the steers.

All but `Journaled` open the history when the first turn is bound, atomically with taking
every steer not yet delivered (daemon/agent/loop.py `start_turn`): a steer accepted any time
before the first turn starts reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from daemon.agent.journal import Journaled
from daemon.tools import WorkflowCursor
from daemon.turn.messages import RESUME_NOTE, Message, first_message, fork_opening, resumed_history


@dataclass(frozen=True)
class Fresh:
    """No checkpoint: the first step's prompt, then the steers."""


@dataclass(frozen=True)
class Resumed:
    """From the last checkpoint, `note` and the steers appended to its last user message."""

    note: str = RESUME_NOTE


@dataclass(frozen=True)
class Forked:
    """A fork's copied history, its steer delivered after the turn it was forked from."""


Opening = Fresh | Resumed | Forked
Start = Opening | Journaled

__all__ = ["Forked", "Fresh", "Journaled", "Opening", "Resumed", "Start", "opening"]


def opening(
    start: Opening, history: Sequence[Message], cursor: WorkflowCursor, steer_texts: Sequence[str]
) -> tuple[int, Message]:
    """How the first turn opens the history, given the steers not yet delivered: (entries to
    keep, the user message to append)."""
    if isinstance(start, Fresh):
        prompt = cursor.current_prompt
        assert prompt is not None, "a workflow not complete has a current step"
        return 0, first_message(prompt, steer_texts)
    if isinstance(start, Forked):  # a step its gate held back comes with the steer
        return fork_opening(history, steer_texts, cursor.release_held() if steer_texts else [])
    return resumed_history(history, steer_texts, start.note)
