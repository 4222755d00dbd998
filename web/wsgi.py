"""The app as an importable WSGI factory: `web.wsgi:app_from_env` (granian loads it by name).

Settings come from the environment and the secrets the server process holds (inherited by
its forked workers: daemon/secrets.py); `worktrain web` passes its flags to the workers as
WORKTRAIN_WEB_STANDALONE=1 and WORKTRAIN_WEB_BODY_SLOTS=N (web/deadlines.py).
"""

from __future__ import annotations

import logging
import os

from flask import Flask

from daemon.config import load_settings

STANDALONE_ENV = "WORKTRAIN_WEB_STANDALONE"
BODY_SLOTS_ENV = "WORKTRAIN_WEB_BODY_SLOTS"


def app_from_env() -> Flask:
    from web.serve import build_app  # web.serve imports gunicorn; only the factory needs it

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return build_app(
        load_settings(),
        standalone=os.environ.get(STANDALONE_ENV) == "1",
        body_slots=int(os.environ.get(BODY_SLOTS_ENV) or 0),
    )
