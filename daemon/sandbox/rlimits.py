"""Per-command resource limits (docs/security.md), set in the launcher before the command runs.

`RLIMIT_AS` (`WORKTRAIN_SANDBOX_MEMORY_MB`, default 4096) bounds each process's address
space, so one runaway command cannot take the worker's host down; `RLIMIT_NPROC` bounds a
fork bomb (not enforced by the kernel for uid 0: as root the PID namespace's teardown is
what ends one); `RLIMIT_FSIZE` bounds a file it writes; `RLIMIT_CPU` the CPU seconds of each
process (the wall-clock timeout is the Bash tool's); no core dumps.

Standard library only, and only `resource`: the launcher imports it before every command.
The numbers come from `policy.Limits` (the worker's side).
"""

from __future__ import annotations

import resource

DEFAULT_MEMORY_MB = 4096
DEFAULT_NPROC = 4096
DEFAULT_FSIZE_MB = 16384
DEFAULT_CPU_SECONDS = 7200
MIB = 1024 * 1024


def apply(limits: dict[str, int]) -> None:
    """Set each limit of `policy.Limits.as_dict()` (soft and hard: the command cannot raise it back)."""
    for which, value in (
        (resource.RLIMIT_AS, limits["memory_mb"] * MIB),
        (resource.RLIMIT_NPROC, limits["nproc"]),
        (resource.RLIMIT_FSIZE, limits["fsize_mb"] * MIB),
        (resource.RLIMIT_CPU, limits["cpu_seconds"]),
        (resource.RLIMIT_CORE, 0),
    ):
        _soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
