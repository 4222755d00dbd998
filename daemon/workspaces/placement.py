"""Where an attempt's agent works, from the record's branch strategy (README's Coding sessions)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon.bus.workspacerecord import WorkspacePlan
from daemon.workspaces.git import GitError
from daemon.workspaces.worktree import branch_for, ensure_worktree, repo_root, worktree_path

DEFAULT_BASE_REF = "HEAD"


class WorkspaceError(Exception):
    """The workspace cannot be set up as the dispatch asked (not a repository, a bad baseRef)."""


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


def place(session_id: str, workspace_path: str, plan: WorkspacePlan) -> Placement:
    """The workspace for this attempt: made (worktree, first claim) or found (a resume)."""
    workspace = Path(workspace_path)
    if plan.branchStrategy == "none":
        return Placement(workspace)
    if plan.branchStrategy == "read-only":
        return Placement(workspace, read_only=True)
    branch = branch_for(session_id, plan.branch)
    base_ref = plan.baseRef or DEFAULT_BASE_REF
    try:
        repo = repo_root(workspace)
        tree, reused = ensure_worktree(repo, session_id, branch, base_ref)
    except GitError as exc:
        raise WorkspaceError(str(exc)) from None
    # a workspacePath below the repository's top: the same folder inside the worktree
    inner = tree / workspace.resolve().relative_to(repo.resolve())
    return Placement(inner, False, repo, tree, branch, base_ref, reused)


def existing_worktree(session_id: str, workspace_path: str, plan: WorkspacePlan) -> Placement | None:
    """The worktree an earlier attempt made, if any (for delivering without running again)."""
    if plan.branchStrategy != "worktree":
        return None
    try:
        repo = repo_root(Path(workspace_path))
    except GitError:
        return None
    tree = worktree_path(repo, session_id)
    if tree.is_symlink() or not tree.is_dir():  # the folder, never what the agent wrote in it
        return None
    branch = branch_for(session_id, plan.branch)
    return Placement(tree, False, repo, tree, branch, plan.baseRef or DEFAULT_BASE_REF, True)
