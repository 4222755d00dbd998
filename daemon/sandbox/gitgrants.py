"""What a command may reach beyond its workspace for git (docs/security.md, README's Coding sessions):
fixed by the
worker when it places the workspace, never derived from a file inside the box.

A worktree session works in a repository of its own (daemon/workspaces/worktree.py):
`<repo>/.worktrain/worktrees/<sid>` with its own `.git` (objects, refs, index, config),
whose `objects/info/alternates` names the main repository's object store. Its commands
write only inside that folder (the workspace grant); git in it also needs to *read* the main
repository's git folder (its objects, through the alternates; its refs, to fetch a child's
branch). That read grant is the only one: computed by `grants_for` from the workspace's
*path* and from the main repository's folder as it was then (outside the box: no session's
command can write it), kept in the session record (`sandboxRead`), and handed to each
command by `register` / `for_workspace` — never by reading `.git`, `gitdir` or `commondir`
(finding 1 of issue 29: `gitdir: /` written by the agent granted the whole file system).

Nothing here opens a file of the box: finding 6 (a FIFO `commondir` hung a worker thread)
has no file left to hang on. What WorkTrain still reads on the agent's side goes through
daemon/host/safefile.py (`read_small`).
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

WORKTREES = (".worktrain", "worktrees")


def _real_dir(path: Path) -> bool:
    """A folder, and not through a symlink at its last step."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def main_repository(workspace: Path) -> Path | None:
    """The repository whose `.worktrain/worktrees/<sid>` holds `workspace` (by its path alone)."""
    real = Path(os.path.realpath(workspace))
    for folder in (real, *real.parents):
        if folder.parent.parts[-2:] == WORKTREES:
            return folder.parent.parent.parent
    return None


def grants_for(workspace: Path) -> list[Path]:
    """The read grants of a session working in `workspace`: the main repository's git
    folder when `workspace` is (inside) one of its session repositories, else none. Only
    real folders count (`<repo>/.git` and its `objects`, no symlink): a `none` session that
    made a look-alike tree gets a read grant on a folder it could already write, no more."""
    repo = main_repository(workspace)
    if repo is None:
        return []
    common = repo / ".git"
    if not (_real_dir(common) and _real_dir(common / "objects")):
        return []
    return [common]


_lock = threading.Lock()
# per workspace, one entry per placed attempt in this process: a `none` child working in its
# parent's repository registers the same folder, and its end must not take the parent's away
_registered: dict[Path, list[tuple[Path, ...]]] = {}


def register(workspace: Path, read: list[Path]) -> None:
    """The grants of a placed session's workspace (from its record), for its commands."""
    with _lock:
        _registered.setdefault(Path(os.path.realpath(workspace)), []).append(tuple(read))


def unregister(workspace: Path) -> None:
    key = Path(os.path.realpath(workspace))
    with _lock:
        entries = _registered.get(key)
        if entries:
            entries.pop()
        if not entries:
            _registered.pop(key, None)


def for_workspace(workspace: Path) -> list[Path]:
    """The read grants registered for `workspace` or the nearest folder holding it."""
    real = Path(os.path.realpath(workspace))
    with _lock:
        for folder in (real, *real.parents):
            if _registered.get(folder):
                return list(_registered[folder][-1])
    return []
