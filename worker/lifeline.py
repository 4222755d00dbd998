"""A child process that dies with its parent: no orphan keeps a session's lease alive.

`worktrain worker` is a tree: the pool's parent (reaper included) forks the RQ workers, and
each RQ worker forks a work horse per job, in a process group of its own (RQ calls
setpgrp), which runs the session and renews its lease from a heartbeat thread. If a parent
dies without passing anything on (SIGKILL, OOM), its children would carry on as orphans:
a horse would keep running its session and renewing its lease, out of sight of any pool,
and `kill -9` of the worker's process group would not reach it. So each child asks Linux to
signal it when its parent dies (prctl PR_SET_PDEATHSIG):

- a work horse gets SIGKILL: its session is resumed elsewhere once the lease lapses, exactly
  as if the horse had been killed with its worker;
- an RQ worker of the pool gets SIGTERM: a warm shutdown, which hands its running session
  over at the next turn boundary (worker/pool.py).

Where prctl is not available (not Linux), a daemon thread polls the parent id instead.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

from daemon.host.prctl import PR_SET_PDEATHSIG, prctl

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


def _watch_parent(parent_pid: int, sig: int) -> None:
    def watch() -> None:
        while os.getppid() == parent_pid:
            threading.Event().wait(POLL_SECONDS)
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def die_with_parent(parent_pid: int, sig: signal.Signals) -> None:
    """Have `sig` sent to this process when the process `parent_pid` (our parent) dies.

    Call it first thing in a freshly forked child; `parent_pid` is the parent's pid taken
    before the fork, so a parent that died before this call is noticed too.
    """
    if not prctl(PR_SET_PDEATHSIG, int(sig)):
        _watch_parent(parent_pid, int(sig))
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os.kill(os.getpid(), int(sig))
