"""`worktrain dispatch`'s workspace: named on purpose, and checked where that is possible.

README's worktrain command: `dispatch` requires `--workspace` (no silent current directory); `--here` says
"the current directory" explicitly. The workspace is a path on the worker's host, which the
client cannot see in general (README, "Workers on other hosts"): the server accepts any
absolute path and a worker ends the session `workspace_not_found` if it is missing there. But
when the API is on this host (a loopback URL, as with `worktrain up`), the workers almost
surely are too, so a path that does not exist here is refused before anything is sent
(usage error, exit 2) rather than queued to fail later.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import click

from daemon.workspaces.worktree import NotARepository, UnsafeRepository, main_repository

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def api_is_local(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def resolve_workspace(workspace: str | None, here: bool, base_url: str) -> str:
    """The absolute workspace path to send; a click usage error when none was named, both
    were, or (for an API on this host) it is not an existing folder here."""
    if workspace is None and not here:
        raise click.UsageError(
            "name the folder the agent works in: --workspace DIR, or --here for the current directory "
            f"({os.getcwd()})."
        )
    if workspace is not None and here:
        raise click.UsageError("give --workspace DIR or --here, not both.")
    path = os.path.abspath(os.path.expanduser(workspace if workspace is not None else "."))
    if api_is_local(base_url) and not os.path.isdir(path):
        what = "is not a folder" if os.path.exists(path) else "does not exist"
        raise click.BadParameter(
            f"{path} {what} (the API at {base_url} runs on this host, so its workers look for it here).",
            param_hint="--workspace",
        )
    return path


def check_repository(path: str, branch_strategy: str | None, base_url: str) -> None:
    """A worktree dispatch needs a git repository: refused here (usage error, exit 2) when
    the API is on this host, rather than queued to fail `workspace_error` (issue 33)."""
    if branch_strategy != "worktree" or not api_is_local(base_url):
        return
    try:
        main_repository(Path(path))
    except UnsafeRepository:
        return  # the API refuses it with the keys named (repository_config_refused)
    except NotARepository:
        raise click.BadParameter(
            f"{path} is not in a git repository: --branch-strategy worktree gives the session a git "
            "worktree and branch of its own, so it needs one (git init, or drop --branch-strategy).",
            param_hint="--workspace",
        ) from None
