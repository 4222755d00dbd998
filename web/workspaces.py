"""Where a dispatched session may work (docs/security.md, `WORKTRAIN_WORKSPACE_ROOTS`).

A workspace is where an agent reads, writes and runs commands. A dispatch naming the data
dir (the Redis password, the API token, every session's JSONL) or `/` would hand all of it
to the agent — an agent that reached the API did exactly that. So dispatch refuses (400
`workspace_not_allowed`) a `workspacePath` that is `/`, the data dir or inside it, or
outside every root of `WORKTRAIN_WORKSPACE_ROOTS` (default: this user's home and `/tmp`).
The worker checks again on its own host (the web tier's view of paths may differ from the worker's).

Paths are compared after `os.path.realpath` on this host (`..` and symlinks resolved where
they exist), so `/home/u/repo/../.worktrain` or a link into the data dir is no way round.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from daemon.sandbox.roots import Roots, default_roots
from daemon.workspaces.worktree import NotARepository, UnsafeRepository, main_repository
from web.errors import ApiError


def workspace_not_allowed(reason: str) -> ApiError:
    return ApiError(400, "workspace_not_allowed", f"workspacePath is not allowed: {reason}.")


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


@dataclass(frozen=True)
class WorkspacePolicy:
    roots: tuple[Path, ...]
    data_dir: Path

    @classmethod
    def of(cls, roots: Iterable[Path], data_dir: Path) -> WorkspacePolicy:
        listed = tuple(roots) or default_roots()
        return cls(tuple(_real(root) for root in listed), _real(data_dir))

    def check(self, workspace_path: str) -> None:
        """Raises 400 `workspace_not_allowed` for a workspace this server must not hand out:
        the worker's own rule (daemon/sandbox/roots.py), on this host's view of the path."""
        refusal = Roots(self.data_dir, self.roots).refusal(Path(workspace_path))
        if refusal is not None:
            raise workspace_not_allowed(refusal)


def check_repository(workspace_path: str, branch_strategy: str | None) -> None:
    """400 `workspace_not_a_repository`: a worktree dispatch on a folder of this host that is
    in no git repository would only fail `workspace_error` on the worker (issue 33). A path
    this host does not have is left to the worker (it may run on another host)."""
    if branch_strategy != "worktree" or not os.path.isdir(workspace_path):
        return
    try:
        main_repository(Path(workspace_path))
    except UnsafeRepository as exc:
        raise ApiError(400, "repository_config_refused", str(exc)) from None
    except NotARepository as exc:
        raise ApiError(
            400,
            "workspace_not_a_repository",
            f"workspacePath: {exc} (git init there, or dispatch without branchStrategy).",
        ) from None
