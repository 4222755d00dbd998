"""What git needs beyond a worktree for a command to commit in it (SPEC §4.8 under §4.7).

A session's worktree (`<repo>/.worktrain/worktrees/<sid>`) keeps only its files: its `.git`
is a file naming its admin folder (`<repo>/.git/worktrees/<sid>`), whose `commondir` names
the repository's git folder. So that `git add` and `git commit` work under Landlock, a
command in such a worktree may also:
- read the repository's git folder (config, refs, objects, hooks);
- write its admin folder (index, HEAD, its reflog), the object store, and the folder of its
  branch's ref and reflog (`refs/heads/worktrain/`, `logs/refs/heads/worktrain/`) — git
  replaces a ref by a lock file renamed over it, so the folder, not the file, is granted.
It cannot write the main checkout, `HEAD`, the config, hooks or any other branch folder.
Said plainly: the branch folder is shared by the `worktrain/...` branches of every session
on that repository, so one session's command could move another's `worktrain/` branch.

Pure but for reading the two small files git itself reads.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_BYTES = 4096


def _first_line(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_BYTES).decode(errors="replace").splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def worktree_grants(workspace: Path) -> tuple[list[Path], list[Path]]:
    """(read, write): the paths git needs for `workspace` if it is a linked worktree, else ([], [])."""
    dotgit = workspace / ".git"
    if not dotgit.is_file():
        return [], []
    line = _first_line(dotgit)
    if not line or not line.startswith("gitdir:"):
        return [], []
    admin = Path(os.path.realpath(workspace / line.removeprefix("gitdir:").strip()))
    common = Path(os.path.realpath(admin / (_first_line(admin / "commondir") or "..")))
    write = [admin, common / "objects"]
    head = _first_line(admin / "HEAD") or ""
    if head.startswith("ref: refs/heads/"):
        branch_folder = Path(head.removeprefix("ref: ")).parent
        if branch_folder != Path("refs/heads"):  # never the folder of every top-level branch
            write += [common / branch_folder, common / "logs" / branch_folder]
    return [common], [p for p in write if p.exists()]
