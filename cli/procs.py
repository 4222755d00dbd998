"""Process-tree helpers for the `worktrain up` supervisor, on /proc and the standard library.

The supervisor must leave no process behind: the web server's workers, RQ work horses (which call
setsid(), so they leave their parent's process group) and whatever an agent's Bash tool
started. On Linux the supervisor makes itself a child subreaper, so an orphaned descendant
is re-parented to it rather than to init and stays findable in its process tree, and each
child gets a parent-death signal, so even a supervisor killed with SIGKILL takes its direct
children down.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from daemon.host.prctl import PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, load_libc, prctl

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Proc:
    """A process, identified by pid and start time (so a reused pid is not mistaken for it)."""

    pid: int
    start: int

    def alive(self) -> bool:
        stat = read_stat(self.pid)
        return stat is not None and stat[2] == self.start and stat[1] != "Z"


def read_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of `pid` from /proc/<pid>/stat, or None if it is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after its last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def _all_parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if entry.name.isdigit():
                stat = read_stat(int(entry.name))
                if stat is not None:
                    parents[int(entry.name)] = stat[0]
    return parents


def descendants(root: int, exclude: frozenset[int] = frozenset()) -> list[Proc]:
    """Every live process below `root`, nearest first, zombies excluded; the processes in
    `exclude` and everything below them are left out."""
    parents = _all_parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: list[Proc] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop(0)
        for child in sorted(children.get(pid, [])):
            stat = read_stat(child)
            if stat is None or child in exclude:
                continue
            frontier.append(child)
            if stat[1] != "Z":
                found.append(Proc(child, stat[2]))
    return found


def signal_all(procs: list[Proc], sig: signal.Signals) -> None:
    for proc in procs:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, sig)


def kill_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by `pid` (each child starts its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def reap_orphans(known: set[int]) -> None:
    """Collect exited processes re-parented to this subreaper (not our Popen children)."""
    me = os.getpid()
    for pid, ppid in _all_parents().items():
        if ppid == me and pid not in known:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            except OSError as exc:
                if exc.errno != errno.ECHILD:
                    raise


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it (Linux >= 3.4)."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> None:
    """For `preexec_fn`: the child gets SIGTERM when the supervisor dies, even by SIGKILL.

    libc is loaded before the fork (`prepare_die_with_parent`), so the child only calls it.
    """
    prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def prepare_die_with_parent() -> None:
    load_libc()
