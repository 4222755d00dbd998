"""A session's repository (README's Coding sessions, docs/security.md): made at its first claim,
reused by a resumed attempt.

The session works in `<repo>/.worktrain/worktrees/<sessionId>` (a path any worker sharing the
repository's filesystem computes alike: the resumed attempt finds it without a record
field), on branch `worktrain/<sessionId>` (or the dispatch's `branch`) from `baseRef`. It is
not a linked `git worktree` but a repository of its own (issue 29): its own `.git` with its
own refs, index, config and object store, whose `objects/info/alternates` names the main
repository's objects — read through the sandbox's read grant, never written. Everything in
that folder is the agent's: the worker makes it (`git init` with no template, outside any
repository) and sets its branch, but its checkout, like every later git command that reads
its config or attributes, runs in the box (daemon/workspaces/box.py). It is made in a
staging folder and renamed into place, so a half-made one is never taken for a session's.
`.worktrain/` is added to the repository's `.git/info/exclude`, so the main checkout's
`git status` never shows it. Made and removed under a lock file in the repository's git
dir: two sessions starting on one repository at once do not race on it.

The main repository's own files may be a session's too (a `none` session working in it):
the worker opens them walking from the repository's top one folder at a time, never
through a symlink, never blocking on a FIFO (`_open_in`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from daemon.host.safefile import first_line_or_empty, read_up_to
from daemon.workspaces.box import BoxFor
from daemon.workspaces.git import GitError, git
from daemon.workspaces.repository import NotARepository, Repository, UnsafeRepository

log = logging.getLogger(__name__)

WORKTREES = Path(".worktrain") / "worktrees"
EXCLUDE_LINE = "/.worktrain/"
BRANCH_PREFIX = "worktrain/"
CHECKOUT_TIMEOUT_SECONDS = 300.0
CHECKOUT_SCRIPT = 'git reset -q --hard "$WT_START"'
# a fork's (daemon/workspaces/snapshots.py): HEAD at the snapshot's first parent, the worktree
# its tree, the index its second parent's tree — the source's worktree as it was, exactly
RESTORE_SCRIPT = (
    'git reset -q --hard "$WT_START" && git read-tree -u --reset "$WT_SNAPSHOT" '
    '&& git read-tree --reset "$WT_SNAPSHOT^2"'
)
EXCLUDE_CAP_BYTES = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def branch_for(session_id: str, branch: str | None) -> str:
    return branch or f"{BRANCH_PREFIX}{session_id}"


def repo_root(workspace: Path) -> Path:
    """The top of the git repository holding `workspace`, its config checked (GitError)."""
    return main_repository(workspace).top


def main_repository(workspace: Path) -> Repository:
    """The repository a worktree session of `workspace` is made in: checked (its config) and
    plain — its `.git` a folder of its own at its top, not a symlink, a linked worktree's
    or a submodule's pointer (grants and delivery are fixed from that folder)."""
    repository = Repository.at(workspace)
    git_dir = repository.top / ".git"
    if not (repository.git_dir == git_dir == repository.common_dir and _is_folder(git_dir)):
        raise NotARepository(
            f"{repository.top} is not a repository WorkTrain can make session repositories in: its git "
            "folder must be its own `.git` folder (not a linked worktree, a submodule or a symlink)"
        )
    return repository


def worktree_path(repo: Path, session_id: str) -> Path:
    return repo / WORKTREES / session_id


def staging_path(repo: Path, session_id: str) -> Path:
    return repo / WORKTREES / f".{session_id}.partial"


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def _open_in(
    top: Path, parts: tuple[str, ...], flags: int = _DIR_FLAGS, create: bool = False
) -> Iterator[int]:
    """A descriptor of `top/parts...`, walked one folder at a time with no symlink followed
    (OSError: ELOOP for a symlink, ENOTDIR, ...); `create`: missing folders are made."""
    fds = [os.open(top, _DIR_FLAGS)]
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            if create and (not last or flags & os.O_DIRECTORY):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fds[-1])
            fds.append(os.open(name, flags if last else _DIR_FLAGS, 0o644, dir_fd=fds[-1]))
        yield fds[-1]
    finally:
        for fd in reversed(fds):
            os.close(fd)


@contextlib.contextmanager
def repo_lock(repo: Repository) -> Iterator[None]:
    """One worktree change at a time on this repository (per host)."""
    flags = os.O_RDWR | os.O_CREAT | _FILE_FLAGS
    with _open_in(repo.top, (".git", "worktrain.lock"), flags) as fd:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise GitError(f"{repo.top}/.git/worktrain.lock is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield


def exclude_worktrees(repo: Repository) -> None:
    """`.worktrain/` in the repository's info/exclude (once)."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | _FILE_FLAGS
    with _open_in(repo.top, (".git", "info", "exclude"), flags, create=True) as fd:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise GitError(f"{repo.git_dir}/info/exclude is not a regular file")
        existing = read_up_to(fd, EXCLUDE_CAP_BYTES).decode("utf-8", errors="replace")
        if EXCLUDE_LINE not in existing.splitlines():
            separator = "" if not existing or existing.endswith("\n") else "\n"
            os.write(fd, f"{separator}{EXCLUDE_LINE}\n".encode())


@dataclass(frozen=True)
class Made:
    """A session's repository: where, whether an earlier attempt made it, and whether its
    branch existed in the main repository before (then delivery only fast-forwards it)."""

    path: Path
    reused: bool
    branch_existed: bool


def ensure_worktree(
    repo: Repository,
    session_id: str,
    branch: str,
    base_ref: str,
    boxes: BoxFor,
    snapshot: Callable[[Repository], str] | None = None,
) -> Made:
    """The session's repository, made now or found from an earlier attempt. `snapshot`: a
    fork's, made from the snapshot commit it returns (pinned in `repo` by then)."""
    path = worktree_path(repo.top, session_id)
    with repo_lock(repo):
        exclude_worktrees(repo)
        existed = repo.ok("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
        if _is_folder(path):
            return Made(path, True, existed)
        with _open_in(repo.top, WORKTREES.parts, create=True) as folder:
            staging = staging_path(repo.top, session_id).name
            with contextlib.suppress(FileNotFoundError):  # a make cut short: no agent ever worked there
                shutil.rmtree(staging, dir_fd=folder)
                log.warning("removed %s, left by an interrupted start of session %s", staging, session_id)
            # a branch there already (the dispatch named it, or it outlived its worktree): carry on on it
            commit = snapshot(repo) if snapshot is not None and not existed else None
            start_ref = f"refs/heads/{branch}" if existed else f"{commit}^1" if commit else base_ref
            start = repo.run("rev-parse", "--verify", f"{start_ref}^{{commit}}")
            _make_repository(repo, repo.top / WORKTREES / staging, branch, start, boxes, commit)
            os.rename(staging, session_id, src_dir_fd=folder, dst_dir_fd=folder)
    log.info("session %s works in its repository %s on branch %s", session_id, path, branch)
    return Made(path, False, existed)


def _make_repository(
    repo: Repository, path: Path, branch: str, start: str, boxes: BoxFor, snapshot: str | None = None
) -> None:
    """A repository at `path` borrowing `repo`'s objects, on `branch` at `start`, checked out
    in the box (a config or attribute written there meanwhile runs nothing outside it) — or,
    for a fork, restored from `snapshot` (whose first parent is `start`)."""
    git(Path("/"), "init", "-q", "--template=", "-b", branch, str(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS
    parts = (*path.relative_to(repo.top).parts, ".git", "objects", "info", "alternates")
    with _open_in(repo.top, parts, flags, create=True) as fd:
        os.write(fd, f"{repo.common_dir / 'objects'}\n".encode())
    git(path, "update-ref", f"refs/heads/{branch}", start)
    script, env = (RESTORE_SCRIPT, {"WT_SNAPSHOT": snapshot}) if snapshot else (CHECKOUT_SCRIPT, {})
    code, output = boxes([repo.common_dir]).run(
        path, script, {**env, "WT_START": start}, CHECKOUT_TIMEOUT_SECONDS
    )
    if code != 0:
        raise GitError(f"the checkout of the session's repository failed ({code}): {output.strip()[-800:]}")


def remove_worktree(repo: Repository, path: Path) -> None:
    """Remove a session's repository (its branch in the main repository stays). rmtree
    follows no symlink the agent left, and the folder is reached through none."""
    relative = path.relative_to(repo.top)
    with repo_lock(repo):
        try:
            with _open_in(repo.top, relative.parts[:-1]) as folder:
                shutil.rmtree(relative.name, dir_fd=folder)
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
    names = sorted(os.listdir(root)) if _is_folder(root) and _is_folder(root.parent) else []
    for name in names:
        path = root / name
        if name.startswith(".") or not _is_folder(path):
            continue
        head = first_line_or_empty(path / ".git" / "HEAD")
        branch = head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") else None
        commit = first_line_or_empty(path / ".git" / "refs" / "heads" / branch) if branch else head
        found.append(WorktreeInfo(path, name, branch, commit or None))
    return found


__all__ = [
    "BRANCH_PREFIX",
    "Made",
    "NotARepository",
    "UnsafeRepository",
    "branch_for",
    "ensure_worktree",
    "list_worktrees",
    "main_repository",
    "remove_worktree",
    "repo_root",
    "worktree_path",
]
