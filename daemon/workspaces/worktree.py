"""A session's repository (README's Coding sessions, docs/security.md): made at its first claim, reused
by a resumed attempt.

The session works in `<repo>/.worktrain/worktrees/<sessionId>` (a path any worker sharing the
repository's filesystem computes alike: the resumed attempt finds it without a record
field), on branch `worktrain/<sessionId>` (or the dispatch's `branch`) from `baseRef`. It is
not a linked `git worktree` but a repository of its own (issue 29): its own `.git` with its
own refs, index, config and object store, whose `objects/info/alternates` names the main
repository's objects — read through the sandbox's read grant, never written. Everything in
that folder is the agent's; the worker never runs git in it (delivery runs its git in the
box and fetches the branch into the main repository: daemon/workspaces/delivery.py). It is
made in a staging folder and renamed into place, so a half-made one is never taken for a
session's. `.worktrain/` is added to the repository's `.git/info/exclude`, so the main
checkout's `git status` never shows it. Made and removed under a lock file in the
repository's git dir: two sessions starting on one repository at once do not race on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from daemon.host.safefile import first_line_or_empty
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


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def staging_path(repo: Path, session_id: str) -> Path:
    return repo / WORKTREES / f".{session_id}.partial"


def common_dir(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def ensure_worktree(repo: Path, session_id: str, branch: str, base_ref: str) -> tuple[Path, bool]:
    """The session's repository, made now or found from an earlier attempt; (path, reused)."""
    path = worktree_path(repo, session_id)
    with repo_lock(repo):
        exclude_worktrees(repo)
        if _is_folder(path):
            return path, True
        staging = staging_path(repo, session_id)
        if staging.exists():  # a make cut short: no agent ever worked there
            log.warning("removing %s, left by an interrupted start of session %s", staging, session_id)
            shutil.rmtree(staging)
        staging.parent.mkdir(parents=True, exist_ok=True)
        if ok(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"):
            # the branch outlived its worktree (removed by hand, or a crash mid-way): carry on on it
            start = git(repo, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
        else:
            start = git(repo, "rev-parse", "--verify", f"{base_ref}^{{commit}}")
        _make_repository(staging, common_dir(repo), branch, start)
        os.rename(staging, path)
    log.info("session %s works in its repository %s on branch %s", session_id, path, branch)
    return path, False


def _make_repository(path: Path, common: Path, branch: str, start: str) -> None:
    """A repository at `path` borrowing `common`'s objects, on `branch` at `start`, checked out.
    Run by the worker before any agent ever touched `path`: nothing in it is the agent's yet."""
    git(path.parent, "init", "-q", "-b", branch, str(path))
    (path / ".git" / "objects" / "info" / "alternates").write_text(f"{common / 'objects'}\n")
    git(path, "update-ref", f"refs/heads/{branch}", start)
    git(path, "reset", "-q", "--hard", start)


def remove_worktree(repo: Path, path: Path) -> None:
    """Remove a session's repository (its branch in the main repository stays). rmtree
    follows no symlink the agent left."""
    with repo_lock(repo):
        try:
            shutil.rmtree(path)
        except OSError as exc:
            raise GitError(f"could not remove {path}: {exc}") from None


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    session_id: str
    branch: str | None
    head: str | None


def list_worktrees(repo: Path) -> list[WorktreeInfo]:
    """The sessions' repositories in `repo` (under .worktrain/worktrees). Their HEAD and ref
    are the agent's files: read as data (regular files only, never blocking, capped), never
    by running git in them."""
    root = repo / WORKTREES
    found: list[WorktreeInfo] = []
    names = sorted(os.listdir(root)) if _is_folder(root) else []
    for name in names:
        path = root / name
        if name.startswith(".") or not _is_folder(path):
            continue
        head = first_line_or_empty(path / ".git" / "HEAD")
        branch = head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") else None
        commit = first_line_or_empty(path / ".git" / "refs" / "heads" / branch) if branch else head
        found.append(WorktreeInfo(path, name, branch, commit or None))
    return found
