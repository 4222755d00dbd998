"""The runner's hooks for workspaces (README's Coding sessions): place the agent, deliver its work.

`place_agent` turns the record's branch strategy into the agent's workspace (a worktree is
made at the first claim and found again by a resumed attempt) and fixes the workspace's
read grants (daemon/sandbox/gitgrants.py) once: computed at the first placement, kept in the
record (`sandboxRead`), registered for the attempt's commands; never read from the box.
`deliver_work` runs before the session is finished — completed, failed or cancelled alike
(the last two `partial`) — writes `delivery` on the record (fenced: a stale attempt delivers
nothing) and emits `session_delivered`. A hand-over (the worker stopping) delivers nothing: the next attempt
carries on in the same worktree.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.bus.session.steerbus import SessionChannel
from daemon.sandbox import gitgrants
from daemon.schema.events import SessionDelivered
from daemon.schema.records import SessionRecord
from daemon.schema.workspace import Delivery, WorkspacePlan, branch_existed
from daemon.session.gitbox import SandboxBox, boxes
from daemon.tools import Emitter
from daemon.turn.messages import parse_message
from daemon.workspaces.delivery import GIT_BOX_TIMEOUT_SECONDS, DeliverySettings, Ended, deliver
from daemon.workspaces.fetching import fetch_into
from daemon.workspaces.git import GitError
from daemon.workspaces.placement import Placement, existing_worktree, place
from daemon.workspaces.repository import Repository
from daemon.workspaces.snapshots import snapshot_refspec
from daemon.workspaces.worktree import BRANCH_PREFIX, branch_for, remove_worktree

log = logging.getLogger(__name__)


def plan_of(record: SessionRecord) -> WorkspacePlan:
    return WorkspacePlan(
        branchStrategy=record.branchStrategy,
        deliveryMode=record.deliveryMode,
        baseRef=record.baseRef,
        branch=record.branch,
        keepWorktree=record.keepWorktree,
    )


def place_agent(
    record: SessionRecord,
    channel: SessionChannel | None = None,
    snapshot: Callable[[Repository], str] | None = None,
) -> Placement:
    """The agent's workspace for this attempt (WorkspaceError: it cannot be set up), its
    grants registered for its commands (`release_agent` forgets them). `snapshot`: a fork's
    starting point (daemon/session/snapshotting.py `fork_start`)."""
    placed = place(record.sessionId, record.workspacePath, plan_of(record), boxes, snapshot)
    read = record.sandboxRead
    if read is None:  # the first placement: fixed now, from the repository as it is now
        read = [str(path) for path in gitgrants.grants_for(placed.path)]
        if channel is not None:
            first: dict[str, str | int] = {"sandboxRead": json.dumps(read)}
            if placed.worktree is not None:  # delivery only fast-forwards a branch that was there
                first["branchExisted"] = "1" if placed.branch_existed else "0"
            channel.set_fields(first)
    gitgrants.register(placed.path, [Path(path) for path in read])
    return placed


def release_agent(placed: Placement) -> None:
    gitgrants.unregister(placed.path)


def worktree_parent(record: SessionRecord, placed: Placement | None, author: str) -> dict[str, Any]:
    """What a worktree session's children with worktrees of their own need of it (README's Sub-agents
    and questions)."""
    if placed is None or placed.repo is None or placed.worktree is None or placed.branch is None:
        return {}
    grants = grants_of(record, placed.worktree)
    return {
        "repo": str(placed.repo),
        "branch": placed.branch,
        "tree": str(placed.worktree),
        "grants": tuple(str(path) for path in grants),
        "author": author,
        "branch_existed": branch_existed(record.branchExisted, record.branch, placed.branch_existed),
    }


def salvage_and_remove(repo: Repository, tree: Path, session_id: str) -> None:
    """`worktrain worktrees --prune`: a session's repository left behind (its session gone),
    its branches fetched first — nothing an agent did is lost — then removed. The session's
    own `worktrain/<sid>` lands as itself; every branch of its repository (the agent named
    them) only under `refs/worktrain/salvaged/<sid>/`, where no ref of anyone else lives."""
    box = SandboxBox(tuple(gitgrants.grants_for(tree)))
    own = f"refs/heads/{BRANCH_PREFIX}{session_id}"
    refspecs = [
        f"+{own}:{own}",
        f"+refs/heads/*:refs/worktrain/salvaged/{session_id}/*",
        snapshot_refspec(session_id),  # its turns' snapshots, for forks
    ]
    fetch_into(box, repo, tree, refspecs, GIT_BOX_TIMEOUT_SECONDS, f"worktrain: salvage {session_id}")
    remove_worktree(repo, tree)


def grants_of(record: SessionRecord, tree: Path) -> tuple[Path, ...]:
    """The record's read grants (a record from before them: computed from the tree's path)."""
    if record.sandboxRead is not None:
        return tuple(Path(path) for path in record.sandboxRead)
    return tuple(gitgrants.grants_for(tree))


def final_notes(channel: SessionChannel) -> str:
    """The notes of the last continue_workflow call in the checkpointed history."""
    for raw in reversed(channel.history()):
        message = parse_message(raw)
        for use in reversed(message.tool_uses):
            notes = use.input.get("notes") if use.name == "continue_workflow" else None
            if isinstance(notes, str) and notes.strip():
                return notes
    return ""


def deliver_work(
    channel: SessionChannel,
    events: Emitter,
    settings: DeliverySettings,
    record: SessionRecord,
    status: str,
    outcome: str,
) -> Delivery | None:
    """Deliver a worktree session's work (None: no worktree to deliver)."""
    plan = plan_of(record)
    try:
        found = existing_worktree(record.sessionId, record.workspacePath, plan)
    except GitError as exc:  # the repository's config is refused now: the work stays where it is
        return _record(channel, events, record.sessionId, _failed(record, plan.baseRef, str(exc)))
    if found is None:
        return None
    channel.guard()  # a stale attempt neither commits nor pushes
    ended = Ended(record.sessionId, record.goal, final_notes(channel), status, outcome)
    try:
        assert found.worktree is not None
        box = SandboxBox(grants_of(record, found.worktree))
        only_forward = branch_existed(record.branchExisted, record.branch)
        delivery = deliver(found, plan, ended, settings, box, fast_forward_only=only_forward)
    except GitError as exc:
        log.warning("session %s: not delivered: %s", record.sessionId, exc)
        delivery = _failed(record, found.base_ref, str(exc))
    except Exception as exc:  # delivery must never keep a session from finishing
        log.exception("session %s: delivery failed", record.sessionId)
        delivery = _failed(record, found.base_ref, f"{type(exc).__name__}: {exc}")
    return _record(channel, events, record.sessionId, delivery)


def _failed(record: SessionRecord, base_ref: str | None, error: str) -> Delivery:
    branch = branch_for(record.sessionId, record.branch)
    return Delivery(state="failed", branch=branch, baseRef=base_ref or "", error=error)


def _record(channel: SessionChannel, events: Emitter, session_id: str, delivery: Delivery) -> Delivery:
    """`delivery` on the record (fenced) and `session_delivered` emitted."""
    channel.set_fields({"delivery": delivery.model_dump_json()})
    events.emit(
        SessionDelivered(
            sessionId=session_id,
            state=delivery.state,
            branch=delivery.branch,
            headCommit=delivery.headCommit,
            commits=delivery.commits,
            pushed=delivery.pushed,
            error=delivery.error,
        )
    )
    log.info(
        "session %s delivered %s on %s: %s",
        session_id,
        delivery.state,
        delivery.branch,
        delivery.error or "ok",
    )
    return delivery
