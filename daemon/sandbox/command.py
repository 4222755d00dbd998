"""One command's sandbox, end to end (docs/security.md): what the Bash tool calls.

`sandboxed(command, workspace, env, read_only=..., extra_read=..., extra_write=...)` is a
context manager giving the argument list and environment that run `command` with every
layer this host has (daemon/sandbox/report.py probed them once): its PID (and, under
`none`, network) namespace, the data dir's cover, and the launcher's rlimits, Landlock
rules, capability drop and `no_new_privs`. Its private `TMPDIR` (and, under Landlock, its
`HOME`) is made for it and removed when the block ends.

`read_only=True` (a `branchStrategy: read-only` session, README's Coding sessions): the workspace is
readable and nothing of it writable — only the private TMPDIR is: Landlock grants it read
only, and in a mount namespace it is also bind-mounted read-only (daemon/sandbox/namespaces.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from daemon.host.runtimedir import runtime_dir
from daemon.sandbox import gitgrants, namespaces, policy, report
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
    tmpdir = Path(tempfile.mkdtemp(prefix="cmd-", dir=runtime_dir()))
    try:
        # the main repository's git folder for a session's own repository: fixed at placement
        # (daemon/sandbox/gitgrants.py), never read from a file the agent can write
        git_read = gitgrants.for_workspace(workspace)
        plan = policy.plan_for(
            workspace,
            tmpdir,
            available,
            read_only=read_only,
            extra_read=[*extra_read, *git_read],
            extra_write=list(extra_write),
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
        argv = _plan_by_file(argv, plan.encode(), tmpdir)
        private_home = bool(plan.landlock_abi) and policy.home_hidden()
        yield Sandboxed(argv, policy.command_env(dict(env), tmpdir, private_home), mode, tmpdir)
    finally:
        shutil.rmtree(tmpdir, onerror=_log_leftover)
        shutil.rmtree(plan_file(tmpdir).parent, ignore_errors=True)  # Python 3.11: onerror (onexc is 3.12)


def _plan_by_file(argv: list[str], encoded: str, tmpdir: Path) -> list[str]:
    """The launcher reads its plan from a file (`@path`), not its argument list: the
    grants must never make a command line too long for the kernel (finding 1's E2BIG). The
    file sits beside the command's TMPDIR, in a folder of its own no grant names."""
    if encoded not in argv:
        return argv
    path = plan_file(tmpdir)
    path.parent.mkdir(mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(encoded)
    argv = list(argv)
    argv[argv.index(encoded)] = "@" + str(path)
    return argv


def plan_file(tmpdir: Path) -> Path:
    """Where the plan of the command whose TMPDIR is `tmpdir` is written."""
    return tmpdir.with_name(tmpdir.name + ".plan") / "plan"


def _log_leftover(function: object, path: str, exc_info: object) -> None:
    log.warning("could not remove %s of a command's TMPDIR: %s", path, exc_info)
