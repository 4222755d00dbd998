"""Where a session's workspace may be, and what no tool may touch in it (docs/security.md).

Finding M1: a session whose workspace was the data dir (or `/`) had Read return
`redis/password` and Write create files there. Two checks, both on the worker:
- `Roots.refusal(workspace)`: the runner refuses, before any tool runs, a workspace that
  is `/`, the data dir, inside it or above it, or outside `WORKTRAIN_WORKSPACE_ROOTS`
  (default: the worker user's home and `/tmp`, docs/security.md; the web tier refuses the same
  at dispatch with 400 `workspace_not_allowed`);
- `private_inodes()`: the data dir and the worker user's credential files (`~/.ssh`,
  `~/.aws`, ...), as (device, inode) pairs: Read and Write (daemon/tools/confine.py) refuse
  a walk that passes through one, whatever the workspace is — checked on the descriptors
  they hold, so no rename or symlink between a check and the open gets around it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The worker user's credentials, relative to its home.
HOME_SECRETS = (
    ".ssh", ".aws", ".azure", ".gnupg", ".netrc", ".git-credentials", ".docker", ".kube",
    ".pypirc", ".npmrc", ".config/gh", ".config/gcloud", ".config/git/credentials",
)  # fmt: skip


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


@dataclass(frozen=True)
class Roots:
    data_dir: Path
    roots: tuple[Path, ...] = ()  # empty: the defaults (the home and /tmp, docs/security.md)
    home: Path = field(default_factory=Path.home)

    def allowed(self) -> tuple[Path, ...]:
        return self.roots or default_roots(self.home)

    def refusal(self, workspace: Path) -> str | None:
        """Why a session may not work in `workspace` (None: it may)."""
        real, data = _real(workspace), _real(self.data_dir)
        if real == Path("/"):
            return "the workspace is / (it holds WorkTrain's data dir and every secret of this host)"
        if real == data or data in real.parents:
            return f"the workspace {workspace} is inside WorkTrain's data dir {self.data_dir}"
        if real in data.parents:
            return f"the workspace {workspace} holds WorkTrain's data dir {self.data_dir}"
        allowed = [_real(root) for root in self.allowed()]
        if not any(real == root or root in real.parents for root in allowed):
            shown = os.pathsep.join(map(str, self.allowed()))
            return f"the workspace {workspace} is outside WORKTRAIN_WORKSPACE_ROOTS ({shown})"
        return None

    def private(self) -> list[Path]:
        return [self.data_dir, *(self.home / name for name in HOME_SECRETS)]


def default_roots(home: Path | None = None) -> tuple[Path, ...]:
    """Where workspaces may be when WORKTRAIN_WORKSPACE_ROOTS is not set (docs/security.md)."""
    return (home or Path.home(), Path("/tmp"))


_current: Roots | None = None


def configure(roots: Roots) -> None:
    global _current
    _current = roots


def current() -> Roots:
    """The configured roots (the worker's `setup`), else the defaults of this user."""
    if _current is not None:
        return _current
    return Roots(Path(os.environ.get("WORKTRAIN_DATA_DIR") or Path.home() / ".worktrain").expanduser())


def inodes(paths: Sequence[Path]) -> frozenset[tuple[int, int]]:
    """(st_dev, st_ino) of each path that exists."""
    found = set()
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            continue
        found.add((status.st_dev, status.st_ino))
    return frozenset(found)


def private_inodes() -> frozenset[tuple[int, int]]:
    """What Read and Write never open, nor walk through (M1)."""
    return inodes(current().private())
