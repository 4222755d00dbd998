"""The suite leaves no process running: a session-scoped check at the end of each test process.

Each pytest process (the main one, or each pytest-xdist worker) checks its own leftovers, so
two workers never judge each other's processes:

- it makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER) before any test runs, so
  a process orphaned by a test (its parent killed with SIGKILL, or a daemonizing child) is
  re-parented to this pytest process instead of init and stays in its tree;
- every process it starts inherits LEFTOVER_ENV=<this pid> (unless a test builds an
  environment from scratch), which finds one that escaped the tree anyway.

At the end of the session (this fixture is set up first, so it is torn down after every
other session fixture: the suite's redis-server is already stopped), whatever is still
alive below this process or carries its marker fails the run, listed with its command
line — and is killed, so the failed run itself leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.procs import Proc, become_subreaper, descendants, read_stat, signal_all

LEFTOVER_ENV = "WT_TEST_OWNER_PID"
GRACE_SECONDS = 10.0  # processes a last test stopped may take this long to finish exiting


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def marked(owner: int) -> list[Proc]:
    """Live processes whose environment carries this owner's marker."""
    needle = f"{LEFTOVER_ENV}={owner}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == owner:
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        stat = read_stat(int(entry.name))
        if needle in environ and stat is not None and stat[1] != "Z":
            found.append(Proc(int(entry.name), stat[2]))
    return found


def leftovers(owner: int, existing: frozenset[int]) -> list[Proc]:
    found = {p.pid: p for p in (*descendants(owner), *marked(owner)) if p.pid not in existing}
    return sorted(found.values(), key=lambda p: p.pid)


def reap_zombies() -> None:
    """Collect the exit status of every child that ended (orphans adopted as subreaper)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    owner = os.getpid()
    os.environ[LEFTOVER_ENV] = str(owner)
    become_subreaper()
    existing = frozenset(p.pid for p in descendants(owner))  # e.g. a coverage helper
    yield
    deadline = time.monotonic() + GRACE_SECONDS
    while (left := leftovers(owner, existing)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        listed = "\n".join(f"  {p.pid}: {cmdline(p.pid)[:300]}" for p in left)
        signal_all(left, signal.SIGKILL)
        reap_zombies()
        pytest.fail(f"{len(left)} process(es) started by the tests were still running at the end:\n{listed}")
    reap_zombies()


def stop_tree(process: subprocess.Popen[bytes], seconds: float = 10.0) -> None:
    """Stop a process a test started and everything below it: SIGTERM, then SIGKILL of what is
    left, waiting until each is gone (a server's workers included)."""
    tree = descendants(process.pid)
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    wait_gone(tree, seconds)
    signal_all(tree, signal.SIGKILL)


def wait_gone(procs: list[Proc], seconds: float) -> list[int]:
    """The pids of `procs` still alive after up to `seconds` (normally: none)."""
    deadline = time.monotonic() + seconds
    while any(p.alive() for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p.pid for p in procs if p.alive()]


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0
