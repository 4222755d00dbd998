"""What a session keeps of each turn's end, so that it can be forked from any turn (README's
"Fork a session", SPEC 3.12): the hash `wt:session:{ID}:turns` (`Keys.turns_of`).

The history list holds the conversation (one message per entry, each with its turn id); the
record holds the workflow position and the files read *now*. A fork from turn N needs what
they were at N's end, so the worker writes three kinds of fields, all in turn_ended.lua, in
the same atomic step as the turn's end (the drain):

- `end:<n>` — `TurnEnd` JSON, at every turn end that has a reply: turn n ended; `steps` of
  the step texts in the user message after it are its own (the rest of that message — a held
  step a steer released, the steers — belongs to the next turn).
- `state:<n>` — the record fields of the workflow position at n's end (`stepId`,
  `stepTitle`, `stepIndex`, `stepCount`, `fatalIssue`, `waitingFor`, `workflowState`), only
  when they differ from what the attempt wrote last: the position at n's end is the newest
  `state:<m>` with m <= n.
- `snap:<n>` — `SnapshotRef` JSON, worktree sessions: the commit holding the worktree at n's
  end and the session whose repository keeps it (`refs/worktrain/turns/<turn>`); removed
  when that ref is pruned (daemon/workspaces/snapshots.py).

A fork's copied turns keep their source's fields (a `snap:` still names the session whose
repository holds the commit). Pure, but for the field names: no Redis here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.host.ids import SESSION_ID_RE

log = logging.getLogger(__name__)

END, STATE, SNAP = "end:", "state:", "snap:"
COMMIT_PATTERN = r"^[0-9a-f]{40}([0-9a-f]{24})?$"  # SHA-1, or SHA-256 object ids


class TurnEnd(BaseModel):
    """`end:<n>`: the turn ended with a reply."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    steps: int = Field(default=0, ge=0, description="Step texts of the next user message that are its own.")


class SnapshotRef(BaseModel):
    """`snap:<n>`: where the worktree as it was at a turn's end is kept."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sessionId: str = Field(pattern=SESSION_ID_RE.pattern, description="The session whose repository has it.")
    turn: int = Field(ge=1, description="Its turn in that session (`refs/worktrain/turns/<turn>`).")
    commit: str = Field(pattern=COMMIT_PATTERN, description="The snapshot commit (its first parent: HEAD).")


@dataclass(frozen=True)
class Snapshot:
    """What a worktree snapshot at a turn's end made: its commit, and the older turn whose
    snapshot the keep policy dropped in the same step (daemon/workspaces/snapshots.py)."""

    commit: str
    dropped: int | None = None


@dataclass(frozen=True)
class TurnMark:
    """One turn's end, as turn_ended.lua writes it (its ARGV[5..10])."""

    turn: int
    steps: int = 0
    state: Mapping[str, str | int] | None = None  # None: unchanged since the attempt's last mark
    snapshot: SnapshotRef | None = None
    dropped: int | None = None

    def args(self, ttl_seconds: int) -> list[str | int]:
        return [
            self.turn,
            TurnEnd(steps=self.steps).model_dump_json(),
            json.dumps(dict(self.state), separators=(",", ":")) if self.state is not None else "",
            self.snapshot.model_dump_json() if self.snapshot is not None else "",
            self.dropped if self.dropped is not None else "",
            ttl_seconds,
        ]


def _turn_of(name: str, prefix: str) -> int | None:
    number = name[len(prefix) :]
    return int(number) if name.startswith(prefix) and number.isdigit() else None


@dataclass(frozen=True)
class TurnMarks:
    """A session's `turns` hash, read back (a field that does not parse is logged and left out)."""

    ends: dict[int, TurnEnd] = field(default_factory=dict)
    states: dict[int, dict[str, Any]] = field(default_factory=dict)
    snapshots: dict[int, SnapshotRef] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> TurnMarks:
        marks = cls(raw=dict(raw))
        for name, value in raw.items():
            try:
                if (turn := _turn_of(name, END)) is not None:
                    marks.ends[turn] = TurnEnd.model_validate_json(value)
                elif (turn := _turn_of(name, STATE)) is not None:
                    state = json.loads(value)
                    if isinstance(state, dict):
                        marks.states[turn] = state
                elif (turn := _turn_of(name, SNAP)) is not None:
                    marks.snapshots[turn] = SnapshotRef.model_validate_json(value)
            except (ValueError, ValidationError) as exc:
                log.warning("turn mark %s is unreadable: %s", name, exc)
        return marks

    @property
    def last_ended(self) -> int:
        return max(self.ends, default=0)

    def state_at(self, turn: int) -> dict[str, Any] | None:
        """The workflow position at `turn`'s end: the newest state written at or before it."""
        written = [n for n in self.states if n <= turn]
        return self.states[max(written)] if written else None

    def through(self, turn: int) -> dict[str, str]:
        """The raw fields of turns 1..`turn` (what a fork from `turn` copies)."""
        kept: dict[str, str] = {}
        for name, value in self.raw.items():
            number = next((n for p in (END, STATE, SNAP) if (n := _turn_of(name, p)) is not None), None)
            if number is not None and number <= turn:
                kept[name] = value
        return kept
