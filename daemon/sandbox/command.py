"""One command's sandbox, end to end (SPEC §4.7): what the Bash tool calls.

`sandboxed(command, workspace, env, read_only=..., extra_read=..., extra_write=...)` is a
context manager giving the argument list and environment that run `command` with every
layer this host has (daemon/sandbox/report.py probed them once): its PID (and, under
`none`, network) namespace, the data dir's cover, and the launcher's rlimits, Landlock
rules, capability drop and `no_new_privs`. Its private `TMPDIR` (and, under Landlock, its
`HOME`) is made for it and removed when the block ends.

`read_only=True` (a `branchStrategy: read-only` session, SPEC §4.8): the workspace is
readable and nothing of it writable — only the private TMPDIR is: Landlock grants it read
only, and in a mount namespace it is also bind-mounted read-only (daemon/sandbox/namespaces.py).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from daemon.sandbox import namespaces, policy, report
from daemon.sandbox.gitgrants import worktree_grants
from daemon.sandbox.namespaces import Isolation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sandboxed:
    argv: list[str]
    env: dict[str, str]
    mode: Isolation  # how its processes are isolated (GROUP: no PID namespace)
    tmpdir: Path


@contextlib.contextmanager
def sandboxed(
    command: str,
    workspace: Path,
    env: Mapping[str, str],
    *,
    read_only: bool = False,
    read_only_mounts: Sequence[Path] = (),
    extra_read: Sequence[Path] = (),
    extra_write: Sequence[Path] = (),
    mode: Isolation | None = None,
    hidden: Sequence[Path] | None = None,
) -> Iterator[Sandboxed]:
    """How to run `command` in `workspace`, confined; its TMPDIR removed after the block.
    `read_only_mounts`: folders a mount namespace makes read-only too (default: the workspace
    when `read_only`); without a namespace Landlock alone keeps a read-only workspace so."""
    probe = report.current()
    mode = mode or namespaces.isolation()[0]
    available = (
        probe.available if mode.namespaced else replace(probe.available, namespaced=False, netns=False)
    )
    tmpdir = Path(tempfile.mkdtemp(prefix="worktrain-cmd-"))
    try:
        git_read, git_write = worktree_grants(workspace)  # a session's git worktree commits
        if read_only:
            git_read, git_write = [*git_read, *git_write], []
        plan = policy.plan_for(
            workspace,
            tmpdir,
            available,
            read_only=read_only,
            extra_read=[*extra_read, *git_read],
            extra_write=[*extra_write, *git_write],
        )
        covered = namespaces.hidden_for(workspace) if hidden is None else hidden
        mounts = (list(read_only_mounts) or [workspace]) if read_only or read_only_mounts else []
        if mounts and not (mode.namespaced or plan.landlock_abi):
            raise ValueError(
                "a read-only folder needs a mount namespace or Landlock, and this host has neither"
            )
        argv = namespaces.argv_for(
            mode, command, covered, mounts if mode.namespaced else (), plan=plan, net=plan.loopback_up
        )
        private_home = bool(plan.landlock_abi) and policy.home_hidden()
        yield Sandboxed(argv, policy.command_env(dict(env), tmpdir, private_home), mode, tmpdir)
    finally:
        shutil.rmtree(tmpdir, onerror=_log_leftover)  # Python 3.11: onerror (onexc is 3.12)


def _log_leftover(function: object, path: str, exc_info: object) -> None:
    log.warning("could not remove %s of a command's TMPDIR: %s", path, exc_info)
