"""A session's git worktree (SPEC §4.8): made at its first claim, reused by a resumed attempt.

The worktree is `<repo>/.worktrain/worktrees/<sessionId>` (a path any worker sharing the
repository's filesystem computes alike: the resumed attempt finds it without a record
field), on branch `worktrain/<sessionId>` (or the dispatch's `branch`) from `baseRef`.
`.worktrain/` is added to the repository's `.git/info/exclude`, so the main checkout's
`git status` never shows it. `git worktree add` and `remove` take a lock file in the
repository's git dir: two sessions starting on one repository at once do not race on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from daemon.workspaces.git import GitError, git, ok

log = logging.getLogger(__name__)

WORKTREES = Path(".worktrain") / "worktrees"
EXCLUDE_LINE = "/.worktrain/"
BRANCH_PREFIX = "worktrain/"


def branch_for(session_id: str, branch: str | None) -> str:
    return branch or f"{BRANCH_PREFIX}{session_id}"


def repo_root(workspace: Path) -> Path:
    """The top of the git repository holding `workspace` (GitError when it is not in one)."""
    if not workspace.is_dir():
        raise GitError(f"{workspace} does not exist")
    try:
        return Path(git(workspace, "rev-parse", "--show-toplevel"))
    except GitError:
        raise GitError(
            f"{workspace} is not in a git repository (branchStrategy worktree needs one)"
        ) from None


def worktree_path(repo: Path, session_id: str) -> Path:
    return repo / WORKTREES / session_id


@contextlib.contextmanager
def repo_lock(repo: Path) -> Iterator[None]:
    """One worktree change at a time on this repository (per host)."""
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    fd = os.open(common / "worktrain.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def exclude_worktrees(repo: Path) -> None:
    """`.worktrain/` in the repository's info/exclude (once)."""
    exclude = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "info/exclude"))
    exclude.parent.mkdir(parents=True, exist_ok=True)
    existing = exclude.read_text() if exclude.exists() else ""
    if EXCLUDE_LINE not in existing.splitlines():
        with exclude.open("a") as handle:
            handle.write(("" if not existing or existing.endswith("\n") else "\n") + EXCLUDE_LINE + "\n")


def ensure_worktree(repo: Path, session_id: str, branch: str, base_ref: str) -> tuple[Path, bool]:
    """The session's worktree, made now or found from an earlier attempt; (path, reused)."""
    path = worktree_path(repo, session_id)
    with repo_lock(repo):
        exclude_worktrees(repo)
        if (path / ".git").exists():
            return path, True
        if path.exists():  # a `worktree add` killed before it wrote .git: no agent ever worked here
            log.warning("removing %s, left by an interrupted `git worktree add`", path)
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if ok(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"):
            # the branch outlived its worktree (removed by hand, or a crash mid-way): carry on on it
            git(repo, "worktree", "prune")
            git(repo, "worktree", "add", str(path), branch)
        else:
            base = git(repo, "rev-parse", "--verify", f"{base_ref}^{{commit}}")
            git(repo, "worktree", "add", "-b", branch, str(path), base)
    log.info("session %s works in worktree %s on branch %s", session_id, path, branch)
    return path, False


def remove_worktree(repo: Path, path: Path) -> None:
    """Remove a worktree (its branch stays)."""
    with repo_lock(repo):
        git(repo, "worktree", "remove", "--force", str(path))
        git(repo, "worktree", "prune")


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    session_id: str
    branch: str | None
    head: str | None


def list_worktrees(repo: Path) -> list[WorktreeInfo]:
    """The WorkTrain worktrees of `repo` (those under .worktrain/worktrees)."""
    root = repo / WORKTREES
    found: list[WorktreeInfo] = []
    for block in git(repo, "worktree", "list", "--porcelain").split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        path = Path(fields.get("worktree", ""))
        if path.parent != root:
            continue
        branch = fields.get("branch", "").removeprefix("refs/heads/") or None
        found.append(WorktreeInfo(path, path.name, branch, fields.get("HEAD")))
    return found
