"""A turn's end mark (daemon/schema/turnmarks.py): what a fork from this turn needs — how much of
the next user message is the turn's own, the workflow position when it changed, the
worktree's snapshot. Made at the turn's end, after its tools and before the drain that
writes it (in the same atomic step as the drain, turn_ended.lua)."""

from __future__ import annotations

import json

from daemon.agent.attempt import Attempt, Turn
from daemon.schema.turnmarks import SnapshotRef, TurnMark


def turn_mark(a: Attempt, turn: Turn) -> TurnMark:
    """The mark of `turn`, its snapshot taken now (a side effect in the session's repository:
    after the fence's check). The position is written only when it changed since this
    attempt's last mark (an attempt's first mark always writes it)."""
    own = a.own
    snapshot, kept = None, None
    if own.snapshot is not None:
        a.channel.guard()
        snapshot = own.snapshot(turn.id)
    if snapshot is not None:
        kept = SnapshotRef(sessionId=own.session_id, turn=turn.id, commit=snapshot.commit)
    fields = a.s.cursor.fields()
    state = json.dumps(fields, sort_keys=True)
    changed, own.marked_state = state != own.marked_state, state
    return TurnMark(
        turn=turn.id,
        steps=len(turn.step_texts),
        state=fields if changed else None,
        snapshot=kept,
        dropped=snapshot.dropped if snapshot else None,
    )
