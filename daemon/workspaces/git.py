"""Running `git` on the worker's host: one function, errors as `GitError` with git's words.

Every call disables what a repository could make git run on its own (hooks, an fsmonitor
daemon, a pager): the worktree was written by an agent, and these commands run outside its
sandbox with the worker's credentials. The worker's own configuration (user, credential
helpers, remotes) still applies: that is how a push authenticates.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 300.0
SAFE_CONFIG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.pager=cat")


class GitError(Exception):
    """A git command failed (or git is missing): the message says which and why."""


def git_binary() -> str:
    found = shutil.which("git")
    if found is None:
        raise GitError("git is not installed on this worker's host (worktree mode needs it)")
    return found


def git(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = GIT_TIMEOUT_SECONDS
) -> str:
    """`git args` in `cwd`; its stdout (stripped). GitError on a non-zero exit."""
    argv = [git_binary(), *SAFE_CONFIG, *args]
    environment = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {timeout:.0f}s") from None
    except OSError as exc:
        raise GitError(f"git {args[0]} could not run in {cwd}: {exc.strerror}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-800:]
        raise GitError(f"git {' '.join(args[:3])} failed ({done.returncode}): {said}")
    return done.stdout.strip()


def ok(cwd: Path, *args: str) -> bool:
    """Whether `git args` succeeds (a yes/no question such as `rev-parse --verify`)."""
    try:
        git(cwd, *args)
    except GitError:
        return False
    return True
