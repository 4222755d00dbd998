"""A worktree session's snapshot at each turn's end (README's "Fork a session",
daemon/workspaces/snapshots.py): the hook the runner gives the loop. Taken in the box of
the session's repository, with the grants fixed at its first placement; one that cannot be
made is logged and the turn has no snapshot (a fork from it answers 409) — it never stops
the session."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.host.faults import FaultPlan, crash_point
from daemon.sandbox import gitgrants
from daemon.schema.records import SessionRecord
from daemon.schema.turnmarks import Snapshot
from daemon.session.gitbox import SandboxBox
from daemon.session.workplace import grants_of
from daemon.workspaces.delivery import GIT_BOX_TIMEOUT_SECONDS, DeliverySettings
from daemon.workspaces.git import GitError
from daemon.workspaces.placement import Placement
from daemon.workspaces.repository import Repository
from daemon.workspaces.snapshots import (
    SNAPSHOT_TIMEOUT_SECONDS,
    SnapshotTimedOut,
    pin_snapshot,
    take_snapshot,
)
from daemon.workspaces.worktree import worktree_path

log = logging.getLogger(__name__)


@dataclass
class TurnSnapshots:
    """`AttemptState.snapshot` of one attempt: a snapshot at each turn's end, in the session
    repository's box. One that times out (the agent's repository made git hang: a FIFO where
    git reads) turns them off for the rest of the attempt: a turn end never waits twice."""

    box: SandboxBox
    tree: Path
    session_id: str
    author: str
    timeout: float
    off: bool = False

    def __call__(self, turn: int) -> Snapshot | None:
        if self.off:
            return None
        started = time.monotonic()
        try:
            snapshot = take_snapshot(self.box, self.tree, turn, self.author, self.timeout)
        except GitError as exc:
            self.off = isinstance(exc, SnapshotTimedOut)
            log.warning(
                "session %s: no snapshot of turn %d (no fork from it): %s", self.session_id, turn, exc
            )
            return None
        took = (time.monotonic() - started) * 1000
        log.debug("session %s: turn %d snapshot %s in %.0f ms", self.session_id, turn, snapshot.commit, took)
        return snapshot


def turn_snapshots(
    record: SessionRecord, placed: Placement, settings: DeliverySettings
) -> TurnSnapshots | None:
    """The hook for `AttemptState.snapshot` (None: the session has no repository of its own)."""
    tree = placed.worktree
    if tree is None:
        return None
    timeout = min(settings.git_timeout_seconds, SNAPSHOT_TIMEOUT_SECONDS)
    return TurnSnapshots(
        SandboxBox(grants_of(record, tree)), tree, record.sessionId, settings.author, timeout
    )


def fork_start(record: SessionRecord, faults: FaultPlan | None = None) -> Callable[[Repository], str] | None:
    """A worktree fork's starting point, for its first placement (None: not a worktree fork):
    the snapshot it was forked from, pinned in the main repository (found there, or fetched
    from the repository of the session that holds it, its upload-pack in that session's box)."""
    fork = record.forkOf
    if record.branchStrategy != "worktree" or fork is None or fork.snapshot is None:
        return None
    snapshot = fork.snapshot

    def start(repo: Repository) -> str:
        holder = worktree_path(repo.top, snapshot.sessionId)
        box = SandboxBox(tuple(gitgrants.grants_for(holder)))
        pin_snapshot(repo, record.sessionId, snapshot, box, GIT_BOX_TIMEOUT_SECONDS)
        crash_point(faults, "fork_pinned")  # the crash tests: the fork's repository not made yet
        return snapshot.commit

    return start
