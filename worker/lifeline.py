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

The mechanism (prctl, or a thread polling the parent id off Linux) is
daemon/host/lifeline.py's, shared with the web server's workers.
"""

from __future__ import annotations

from daemon.host.lifeline import die_with_parent

__all__ = ["die_with_parent"]
