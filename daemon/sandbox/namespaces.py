"""Where an agent's Bash command runs (README's Coding sessions): a PID namespace of its own, with its own
`/proc`, so it sees and signals none of WorkTrain's processes (no `/proc/$PPID/environ`, no
`/proc/<worker>/mem`); an IPC namespace of its own (docs/security.md), so no System V segment,
semaphore or message queue of the host is in reach; and everything it started —
`setsid` and `nohup` children included — dies with it: when the namespace's first
process (the command's shell) exits, the kernel kills every other process in it; on a
timeout the caller kills `unshare`, whose `--kill-child` takes the namespace down.

Three ways, probed once per process (`isolation`), best first:
- `root`: the worker runs as root: `unshare --pid --ipc --fork --mount-proc` (util-linux).
- `user`: unprivileged, in a user namespace mapping the worker's own uid
  (`--user --map-current-user`), so files and `id` look as they always do; the
  namespace's capabilities serve only to mount, and are dropped (`setpriv`) before the
  command starts, so it cannot undo the mounts.
- `group`: no namespaces here (an old kernel, a seccomp profile, AppArmor): the command
  runs in a process group of its own, killed when it returns or times out; a child that
  left the group (setsid) can survive. The worker says so once at start (`report`), and
  it is non-dumpable (daemon/host/secrets.py), so a same-user process cannot read its memory.

With a plan (daemon/sandbox/policy.py) the command runs through the launcher
(daemon/sandbox/launch.py), which applies rlimits, Landlock, the capability drop and
`no_new_privs` (in `user` mode it replaces `setpriv`); with `net`, `unshare --net` gives it
a network namespace of its own.

In a namespace the data dir (`configure(hidden=...)`: the whole of it, worker/pool.py) and
`/dev/shm` are covered by an empty tmpfs: the command sees empty folders there. A folder
holding the workspace is never covered. `/proc/keys` and `/proc/key-users` read empty
(MASKED_PROC_FILES). In `group` mode nothing is mounted: the host's /proc is what it sees.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from daemon.host.faults import faults_enabled
from daemon.sandbox.launch import bootstrap_code
from daemon.sandbox.policy import Plan

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]  # WorkTrain's tree, where the launcher imports from
PYTHON = sys.executable  # the launcher needs only the standard library of this Python

BASH = "/bin/bash"
PROBE_TIMEOUT_SECONDS = 10.0
# Files of the namespace's own /proc that still show the host: the kernel keyring's lists
# (`/proc/keys`: the uid's keys' serials, names and sizes; `/proc/key-users`: its quota
# line), which no namespace separates. /dev/null is bound over each, as container runtimes
# mask such paths: they read empty.
MASKED_PROC_FILES = ("/proc/keys", "/proc/key-users")
# The namespace's first process: mask MASKED_PROC_FILES, cover each folder named before the
# first `--`, make each named before the second read-only (a read-only bind mount of itself),
# then run the rest — from its folder entered again: a cwd taken before the mounts would
# still write beneath them.
_INIT = (
    f"for f in {' '.join(MASKED_PROC_FILES)}; do "
    '[ ! -e "$f" ] || mount --bind /dev/null "$f" '
    '|| { echo "worktrain: could not hide $f; the command did not run" >&2; exit 125; }; done; '
    'while [ "$1" != -- ]; do '
    '[ -d "$1" ] && { mount -t tmpfs -o size=16k,mode=0700 worktrain-hidden "$1" '
    '|| { echo "worktrain: could not hide $1; the command did not run" >&2; exit 125; }; }; '
    "shift; done; shift; "
    'while [ "$1" != -- ]; do '
    '{ mount --bind "$1" "$1" && mount -o remount,bind,ro "$1"; } '
    '|| { echo "worktrain: could not make $1 read-only; the command did not run" >&2; exit 125; }; '
    "ro=1; shift; done; shift; "
    '{ [ -z "$ro" ] || cd "$(pwd -P)"; } && exec "$@"'
)


class Isolation(StrEnum):
    ROOT = "root"
    USER = "user"
    GROUP = "group"

    @property
    def namespaced(self) -> bool:
        return self is not Isolation.GROUP


_hidden: tuple[Path, ...] = ()


def configure(hidden: Sequence[Path]) -> None:
    """The folders every command of this process must not see (set once, at start)."""
    global _hidden
    _hidden = tuple(Path(p) for p in hidden)


# Always covered: the host's POSIX shared memory and semaphores (`shm_open`, `sem_open`) are
# files there, and the IPC namespace does not reach them (Landlock grants no /dev/shm either)
ALWAYS_HIDDEN = (Path("/dev/shm"),)


def hidden_for(workspace: Path) -> list[Path]:
    """The configured folders (and ALWAYS_HIDDEN) to cover for a command in `workspace`
    (never one holding it)."""
    real = Path(os.path.realpath(workspace))
    return [p for p in (*_hidden, *ALWAYS_HIDDEN) if not (real == p or p in real.parents)]


def _tool(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", os.defpath) + ":/usr/bin:/bin:/usr/sbin:/sbin")


def launcher(plan: Plan) -> list[str]:
    """The launcher's command line (daemon/sandbox/launch.py) for `plan`, up to its `--`."""
    return [PYTHON, "-I", "-S", "-c", bootstrap_code(str(ROOT)), plan.encode(), "--"]


def argv_for(
    mode: Isolation,
    command: str,
    hidden: Sequence[Path] = (),
    read_only: Sequence[Path] = (),
    plan: Plan | None = None,
    net: bool = False,
) -> list[str]:
    """The argument list that runs `command` (with bash -c) under `mode`; the folders in
    `read_only` (a read-only workspace, README's Coding sessions) are bind-mounted read-only; with `plan`,
    through the launcher that applies it (rlimits, Landlock, capabilities); with `net`, in a
    network namespace of its own. Without a namespace a folder can be made read-only only
    by a plan's Landlock rules: ValueError otherwise."""
    run = [BASH, "-c", command]
    if plan is not None:
        run = [*launcher(plan), *run]
    if mode is Isolation.GROUP:
        if read_only and not (plan is not None and plan.landlock_abi):
            raise ValueError(
                "a read-only folder needs a mount namespace or Landlock, and this host has neither"
            )
        return run
    unshare = _tool("unshare") or "unshare"
    prefix = [unshare, "--pid", "--ipc", "--fork", "--mount-proc", "--kill-child"] + (
        ["--net"] if net else []
    )
    if mode is Isolation.USER:
        prefix[1:1] = ["--user", "--map-current-user", "--keep-caps"]
        if plan is None:
            setpriv = _tool("setpriv") or "setpriv"
            run = [setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--", *run]
    elif (
        read_only and plan is None
    ):  # root: without its capabilities it cannot remount the workspace writable
        setpriv = _tool("setpriv") or "setpriv"
        run = [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", *run]
    folders = [*map(str, hidden), "--", *map(str, read_only), "--"]
    return [*prefix, "/bin/sh", "-c", _INIT, "worktrain-init", *folders, *run]


def _works(mode: Isolation) -> str | None:
    """None when `mode` runs a command here (hiding a folder included), else why not."""
    needed = ["unshare", "mount"] + (["setpriv"] if mode is Isolation.USER else [])
    missing = [name for name in needed if _tool(name) is None]
    if missing:
        return f"{', '.join(missing)} not found"
    with tempfile.TemporaryDirectory(prefix="worktrain-probe-") as folder:
        argv = argv_for(mode, 'test "$$" = 1', [Path(folder)])  # the first process of its namespace
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_SECONDS
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip()[:200] or f"exit code {done.returncode}"
    return None


@functools.cache
def isolation() -> tuple[Isolation, str]:
    """The best way that works here, and why the better ones do not ("" when none failed)."""
    if not os.path.isdir("/proc/self/ns"):
        return Isolation.GROUP, "no Linux namespaces on this system"
    if "no-namespaces" in forced_faults():
        return Isolation.GROUP, "forced by WORKTRAIN_SANDBOX_FAULT (a test)"
    reasons: list[str] = []
    modes = [Isolation.ROOT, Isolation.USER] if os.geteuid() == 0 else [Isolation.USER]
    for mode in modes:
        problem = _works(mode)
        if problem is None:
            return mode, "; ".join(reasons)
        reasons.append(f"{mode.value}: {problem}")
    return Isolation.GROUP, "; ".join(reasons)


def forced_faults() -> set[str]:
    """Layers a test forces off (`WORKTRAIN_SANDBOX_FAULT=no-namespaces,no-landlock`), honoured
    only with `WORKTRAIN_FAULTS=1` (daemon/host/faults.py): how the fallback is exercised on a
    host that has every layer."""
    if not faults_enabled():
        return set()
    return {part.strip() for part in os.environ.get("WORKTRAIN_SANDBOX_FAULT", "").split(",") if part.strip()}


def report() -> Isolation:
    """Probe (once) and say how agent commands are isolated."""
    mode, why = isolation()
    if mode.namespaced:
        log.info("agent Bash commands run in a PID namespace of their own (%s)", mode.value)
    else:
        log.warning(
            "agent Bash commands run WITHOUT a PID namespace (%s): they are killed by process "
            "group only, so a child that calls setsid can outlive its command, and /proc shows "
            "this host's processes. To isolate them, allow user namespaces (see README, "
            "'Trust model').",
            why,
        )
    return mode
