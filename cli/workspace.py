"""`worktrain dispatch`'s workspace: named on purpose, and checked where that is possible.

README's worktrain command: `dispatch` requires `--workspace` (no silent current directory); `--here` says
"the current directory" explicitly. The workspace is a path on the workers' filesystem, which
the client cannot see in general (README, "Workers on other hosts"; a compose stack's
`/workspaces` volume): the server accepts any absolute path and a worker ends the session
`workspace_not_found` if it is missing there. But when every live worker sees exactly this
process's files (`WorkersView`: the same kernel, mount namespace and root, which each worker
publishes in `GET /api/v2/workers`; daemon/host/filesystemview.py), as with `worktrain up`, a
path that does not exist here is refused before anything is sent (usage error, exit 2)
rather than queued to fail later. A loopback URL alone proves nothing: a container's
published port is on loopback too.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import click

from cli.client import ApiError, Client
from daemon.host.filesystemview import filesystem_view
from daemon.workspaces.worktree import NotARepository, UnsafeRepository, main_repository


class WorkersView:
    """Whether the API's workers see this process's files, asked (once) only when it matters."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @functools.cached_property
    def shared(self) -> bool:
        """True when at least one worker is live and every one has this process's view."""
        mine = filesystem_view()
        if not mine:
            return False
        try:
            reply = self.client.get("/api/v2/workers")
        except ApiError:
            return False  # nothing to compare with; the dispatch sent next reports the same failure
        data = reply.get("data")
        workers = data.get("workers") if isinstance(data, dict) else None
        if not isinstance(workers, list) or not workers:
            return False
        return all(isinstance(w, dict) and w.get("filesystem") == mine for w in workers)

    def why(self) -> str:
        url = self.client.base_url
        return f"every worker of the API at {url} sees this host's files, so it looks for it here"


def resolve_workspace(workspace: str | None, here: bool, workers: WorkersView) -> str:
    """The absolute workspace path to send; a click usage error when none was named, both
    were, or (when the workers see this host's files) it is not an existing folder here."""
    if workspace is None and not here:
        raise click.UsageError(
            "name the folder the agent works in: --workspace DIR, or --here for the current directory "
            f"({os.getcwd()})."
        )
    if workspace is not None and here:
        raise click.UsageError("give --workspace DIR or --here, not both.")
    path = os.path.abspath(os.path.expanduser(workspace if workspace is not None else "."))
    if not os.path.isdir(path) and workers.shared:
        what = "is not a folder" if os.path.exists(path) else "does not exist"
        raise click.BadParameter(f"{path} {what} ({workers.why()}).", param_hint="--workspace")
    return path


def check_repository(path: str, branch_strategy: str | None, workers: WorkersView) -> None:
    """A worktree dispatch needs a git repository: refused here (usage error, exit 2) when
    the workers see this host's files, rather than queued to fail `workspace_error` (issue 33)."""
    if branch_strategy != "worktree" or not workers.shared:
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
