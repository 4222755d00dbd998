"""Where a session's workspace may be, and what no tool may touch in it (docs/security.md).

Finding M1: a session whose workspace was the data dir (or `/`) had Read return
`redis/password` and Write create files there. Two checks, both on the worker:
- `Roots.refusal(workspace)`: the runner refuses, before any tool runs, a workspace that
  is `/`, or is, is inside or holds what a WorkTrain process reads or runs outside the box
  (the data dir, the runtime folder of sandbox plans, WorkTrain's own code, the Python
  environment it runs in), or is outside `WORKTRAIN_WORKSPACE_ROOTS` (default: the worker
  user's home and `/tmp`, docs/security.md; the web tier refuses the same at dispatch with
  400 `workspace_not_allowed`);
- `private_inodes()`: the data dir and the worker user's credential files (`~/.ssh`,
  `~/.aws`, ...), as (device, inode) pairs: Read and Write (daemon/tools/confine.py) refuse
  a walk that passes through one, whatever the workspace is — checked on the descriptors
  they hold, so no rename or symlink between a check and the open gets around it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from daemon.host.runtimedir import runtime_path

# The worker user's credentials, relative to its home.
HOME_SECRETS = (
    ".ssh", ".aws", ".azure", ".gnupg", ".netrc", ".git-credentials", ".docker", ".kube",
    ".pypirc", ".npmrc", ".config/gh", ".config/gcloud", ".config/git",
    ".gitconfig",  # the operator's git config: read by WORKTRAIN_DELIVERY_COMMAND's git
)  # fmt: skip
CODE_ROOT = Path(__file__).resolve().parents[2]  # WorkTrain's tree: the launcher imports from it


def own_paths(data_dir: Path) -> list[tuple[str, Path]]:
    """What a WorkTrain process reads or runs outside the box, so no workspace may be, be in or
    hold (docs/security.md): each with the words a refusal names it by."""
    return [
        ("WorkTrain's data dir", data_dir),
        ("WorkTrain's runtime folder (sandbox plans)", runtime_path()),
        ("WorkTrain's own code", CODE_ROOT),
        ("the Python environment WorkTrain runs in", Path(sys.prefix)),
        ("the Python installation WorkTrain runs on", Path(sys.base_prefix)),
    ]


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
        real = _real(workspace)
        if real == Path("/"):
            return "the workspace is / (it holds WorkTrain's data dir and every secret of this host)"
        for name, path in own_paths(self.data_dir):
            own = _real(path)
            if real == own or own in real.parents:
                return f"the workspace {workspace} is inside {name} {path}"
            if real in own.parents:
                return f"the workspace {workspace} holds {name} {path}"
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
