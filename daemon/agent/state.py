"""What the loop (daemon/agent/loop.py) and the model turn (daemon/agent/modelturn.py) read and
update between turns, in two parts: `SessionState`, what a checkpoint stores (and the runner
restores from the session record and its history), and `AttemptState`, what the attempt was
given and keeps for itself, never checkpointed. Their own module so both the loop and the
model turn import them and neither imports the other's module for them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.agent.model import Usage
from daemon.agent.prices import cost_usd
from daemon.schema.turnmarks import Snapshot
from daemon.tools import WorkflowCursor
from daemon.tools.coordination import Coordinator
from daemon.tools.ledger import FileLedger
from daemon.turn.messages import Message


@dataclass
class SessionState:
    """What a checkpoint stores: the history, the turn count, the workflow position, the
    usage and what it cost, the compactions, the files read."""

    cursor: WorkflowCursor
    history: list[Message] = field(default_factory=list)
    turns: int = 0  # turns started so far (across attempts): the last turn id
    usage: Usage = field(default_factory=Usage)  # running sums over every attempt (the record's)
    compactions: int = 0
    # What the agent read (Write/Edit refuse what changed since): checkpointed as `readFiles`
    files: FileLedger = field(default_factory=FileLedger)
    # the model its calls name (set by daemon.agent.modelturn.ModelTurn): what costUsd prices
    model: str | None = None

    def fields(self) -> dict[str, str | int]:
        """The record fields each checkpoint writes: the step position, usage and its cost,
        compactions, the files read (with the history they belong to)."""
        cost = cost_usd(self.model, self.usage)
        return {
            **self.cursor.fields(),
            **self.usage.fields(),
            # "": a model the price table does not know (the record's costUsd is null)
            "costUsd": "" if cost is None else f"{cost:.6f}",
            "compactions": self.compactions,
            "readFiles": self.files.to_json(),
        }


@dataclass
class AttemptState:
    """The attempt's own: what the runner gave it (where it works, its system prompt, its way
    out to the coordinator) and what it keeps between turns, never checkpointed."""

    session_id: str
    workspace: Path
    system: str
    issues: Any  # daemon.bus.streams.issues.IssueSink (anything with `record(issue)`)
    elapsed_before: float = 0.0  # wall-clock seconds the session ran before this attempt
    read_only: bool = False  # branchStrategy read-only (README's Coding sessions)
    # signal_coordinator and spawn_agent's way out (daemon.session.coordinator.SessionCoordinator)
    coordinator: Coordinator | None = None
    # A worktree session's snapshot of its worktree at a turn's end (daemon/session/snapshotting.py;
    # None: no worktree), and the workflow position its last turn mark wrote (daemon/agent/turnmark.py)
    snapshot: Callable[[int], Snapshot | None] | None = None
    marked_state: str | None = None
    # the last reply's tool calls and how many replies in a row asked for them (`agent_stuck`)
    signature: tuple[tuple[str, str], ...] = ()
    repeats: int = 0
