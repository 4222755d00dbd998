"""A child process that dies with its parent (prctl PR_SET_PDEATHSIG, else a watch thread).

Every process WorkTrain starts must end with the process that started it, even when that one
is killed with SIGKILL and can pass nothing on: `up`'s children (cli/procs.py arms them in
`preexec_fn`), the worker pool's RQ workers and work horses (worker/lifeline.py), and the web
server's workers (web/wsgi.py, web/serve.py), which would otherwise go on listening as
orphans. The signal is chosen by the caller: SIGTERM where the child can shut down warmly,
SIGKILL where nothing is left worth finishing.

Linux sends the signal when the *thread* that forked the child ends; every caller forks from
its main thread. Where prctl is not available (not Linux), a daemon thread polls the parent id.
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
