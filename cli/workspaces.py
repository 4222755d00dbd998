"""Workspaces on the command line (README's Coding sessions): dispatch's `--branch-strategy`, `--delivery`,
`--base-ref`, `--branch`, `--keep-worktree`, and `worktrain worktrees [--prune]`.

`worktrees` reads the repository's git worktrees on this host (those WorkTrain made, under
`<repo>/.worktrain/worktrees/`) and asks the API for each one's session: a worktree left
behind (`keepWorktree`, a delivery that failed, a session that ended while its worker was
down) is listed with its session's status; `--prune` removes those whose session is no
longer live. The branches stay: only the working folders go.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from cli.client import ApiError
from cli.common import Call, client_command
from cli.output import print_json, print_table, say

LIVE = ("queued", "running", "waiting")


def workspace_options(fn: Callable[..., None]) -> Callable[..., None]:
    """The dispatch options of README's Coding sessions (passed on to the body only when given)."""
    options = [
        click.option(
            "--branch-strategy",
            type=click.Choice(("none", "read-only", "worktree")),
            help="none: the workspace as it is; read-only: nothing can be written; worktree: a git "
            "worktree and branch of its own [server default: none].",
        ),
        click.option(
            "--delivery",
            type=click.Choice(("commit", "push", "none")),
            help="worktree: at the end, commit the work on its branch, also push it, or neither "
            "[server default: commit].",
        ),
        click.option("--base-ref", help="worktree: the revision the branch starts from [default: HEAD]."),
        click.option("--branch", help="worktree: the branch's name [default: worktrain/<sessionId>]."),
        click.option("--keep-worktree", is_flag=True, default=None, help="worktree: keep it after delivery."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def workspace_body(options: dict[str, Any]) -> dict[str, Any]:
    """The dispatch body's workspace fields from the options given."""
    names = {
        "branch_strategy": "branchStrategy",
        "delivery": "delivery",
        "base_ref": "baseRef",
        "branch": "branch",
        "keep_worktree": "keepWorktree",
    }
    return {field: options[name] for name, field in names.items() if options.get(name) is not None}


@client_command("worktrees", short_help="List (and prune) the worktrees sessions left in a repository.")
@click.argument("repo", default=".", type=click.Path(file_okay=False, exists=True))
@click.option("--prune", is_flag=True, help="Remove the worktrees of sessions that are no longer live.")
def worktrees(call: Call, repo: str, prune: bool) -> None:
    """List WorkTrain's git worktrees in REPO (default: here) with their sessions' status."""
    from daemon.session.workplace import salvage_and_remove
    from daemon.workspaces.git import GitError
    from daemon.workspaces.worktree import list_worktrees, main_repository

    try:
        repository = main_repository(Path(os.path.abspath(repo)))
        top = repository.top
        found = list_worktrees(top)
    except GitError as exc:
        raise click.ClickException(str(exc)) from None
    rows: list[dict[str, Any]] = []
    for tree in found:
        status = _status(call, tree.session_id)
        removed = False
        if prune and status not in LIVE:
            try:
                salvage_and_remove(repository, tree.path, tree.session_id)
                removed = True
            except GitError as exc:
                say(f"could not remove {tree.path}: {exc}", err=True)
        rows.append(
            {"sessionId": tree.session_id, "path": str(tree.path), "branch": tree.branch, "status": status}
            | ({"removed": removed} if prune else {})
        )
    if call.as_json:
        print_json({"repo": str(top), "worktrees": rows})
        return
    if not rows:
        say(f"No WorkTrain worktrees in {top}.")
        return
    columns = ("session", "status", "branch", "path", *(("pruned",) if prune else ()))
    print_table(
        columns,
        [
            (
                r["sessionId"],
                r["status"],
                r["branch"] or "-",
                r["path"],
                *(("removed" if r.get("removed") else "kept",) if prune else ()),
            )
            for r in rows
        ],
        title=f"worktrees in {top}",
    )


def _status(call: Call, session_id: str) -> str:
    """The session's status, `unknown` when the API has no such session (expired)."""
    try:
        data = call.client.get(f"/api/v2/sessions/{session_id}").get("data", {})
    except ApiError as exc:
        if exc.status == 404:
            return "unknown"
        raise
    return str(data.get("status", "unknown"))
