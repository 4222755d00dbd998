"""Fetching a session repository's refs into the main repository (docs/security.md, "The agent's
git is its own"): the worker's own git in the main repository, with `transfer.fsckObjects`
on, and `git upload-pack` serving the session's repository from inside the box. The
agent's objects reach the main repository only as a pack git verifies; only the refs the
refspecs name move; the worker never opens the session repository's config, attributes,
hooks, `commondir` or `HEAD`. Delivery (its branch), `worktrees --prune` (salvage), a
worktree parent's children and a fork (a turn's snapshot) all fetch this way.
"""

from __future__ import annotations

from pathlib import Path

from daemon.workspaces.box import Box
from daemon.workspaces.git import safe_environment
from daemon.workspaces.repository import Repository

# the worker's git in the main repository, fetching a session's refs: verify every object
FETCH_CONFIG = (
    "-c",
    "transfer.fsckObjects=true",
    "-c",
    "protocol.version=0",
    "-c",
    "fetch.recurseSubmodules=false",
)


def fetch_into(
    box: Box, repo: Repository, tree: Path, refspecs: list[str], timeout: float, reflog: str
) -> None:
    """`git fetch` of a session repository's refs into the main repository (its upload-pack in
    the box; its environment and plan passed by the environment, never on the line, and the
    reflog saying `reflog`, not the command line)."""
    with box.upload_pack(tree) as (upload_pack, box_env):
        env = {**safe_environment(box_env), "GIT_REFLOG_ACTION": reflog}
        repo.run(
            *FETCH_CONFIG, "fetch", "--no-tags", "--no-write-fetch-head",
            "--upload-pack", upload_pack, str(tree), *refspecs, env=env, timeout=timeout,
        )  # fmt: skip
