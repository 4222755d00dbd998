"""Where an attempt's agent works, from the record's branch strategy (README's Coding sessions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.schema.workspace import WorkspacePlan
from daemon.workspaces.box import BoxFor
from daemon.workspaces.git import GitError
from daemon.workspaces.repository import Repository
from daemon.workspaces.worktree import (
    NotARepository,
    branch_for,
    ensure_worktree,
    main_repository,
    worktree_path,
)

DEFAULT_BASE_REF = "HEAD"


class WorkspaceError(Exception):
    """The workspace cannot be set up as the dispatch asked (not a repository, a bad baseRef,
    a repository whose config the worker's git refuses)."""


@dataclass(frozen=True)
class Placement:
    """The agent's workspace, and for a worktree session what delivery needs to find it."""

    path: Path
    read_only: bool = False
    repo: Path | None = None  # worktree: the repository's top
    worktree: Path | None = None
    branch: str | None = None
    base_ref: str | None = None
    reused: bool = False  # a resumed attempt found the worktree an earlier one made
    branch_existed: bool = False  # the branch was in the repository before this placement


def place(
    session_id: str,
    workspace_path: str,
    plan: WorkspacePlan,
    boxes: BoxFor,
    snapshot: Callable[[Repository], str] | None = None,
) -> Placement:
    """The workspace for this attempt: made (worktree, first claim) or found (a resume).
    `snapshot`: a fork's worktree is made from the snapshot commit it pins and returns."""
    workspace = Path(workspace_path)
    if plan.branchStrategy == "none":
        return Placement(workspace)
    if plan.branchStrategy == "read-only":
        return Placement(workspace, read_only=True)
    branch = branch_for(session_id, plan.branch)
    base_ref = plan.baseRef or DEFAULT_BASE_REF
    try:
        repo = main_repository(workspace)
        made = ensure_worktree(repo, session_id, branch, base_ref, boxes, snapshot)
    except (GitError, OSError) as exc:
        raise WorkspaceError(str(exc)) from None
    # a workspacePath below the repository's top: the same folder inside the worktree
    inner = made.path / workspace.resolve().relative_to(repo.top.resolve())
    return Placement(inner, False, repo.top, made.path, branch, base_ref, made.reused, made.branch_existed)


def existing_worktree(session_id: str, workspace_path: str, plan: WorkspacePlan) -> Placement | None:
    """The worktree an earlier attempt made, if any (for delivering without running again)."""
    if plan.branchStrategy != "worktree":
        return None
    try:
        repo = main_repository(Path(workspace_path))
    except NotARepository:
        return None  # an UnsafeRepository goes up: delivery says why it could not deliver
    tree = worktree_path(repo.top, session_id)
    if tree.is_symlink() or not tree.is_dir():  # the folder, never what the agent wrote in it
        return None
    branch = branch_for(session_id, plan.branch)
    return Placement(tree, False, repo.top, tree, branch, plan.baseRef or DEFAULT_BASE_REF, True)
