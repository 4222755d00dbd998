"""The app as an importable WSGI factory: `web.wsgi:app_from_env` (granian loads it by name).

Settings come from the environment and the secrets the server process holds (inherited by
its forked workers: daemon/host/secrets.py); `worktrain web` passes its flags to the workers as
WORKTRAIN_WEB_STANDALONE=1 and WORKTRAIN_WEB_THREADS=N (its threads: web/threadbudget.py), and its
own pid as WORKTRAIN_WEB_PARENT_PID: each worker dies with it.
"""

from __future__ import annotations

import logging
import os
import signal

from flask import Flask

from daemon.host.config import load_settings
from daemon.host.lifeline import die_with_parent


def app_from_env() -> Flask:
    # web.serve imports gunicorn; only the factory needs it
    from daemon.host.prctl import WEB_COMM, set_process_name
    from web.serve import PARENT_PID_ENV, STANDALONE_ENV, THREADS_ENV, build_app

    parent = os.environ.get(PARENT_PID_ENV)
    if parent:  # a granian worker: it dies with `worktrain web`, even by SIGKILL
        die_with_parent(int(parent), signal.SIGKILL)
        set_process_name(WEB_COMM)  # granian's retitle set comm to its first 15 bytes

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return build_app(
        load_settings(),
        standalone=os.environ.get(STANDALONE_ENV) == "1",
        threads=int(os.environ.get(THREADS_ENV) or 0),
        bound_bodies=True,  # granian: its body reads have no timeout (web/deadlines.py)
    )
