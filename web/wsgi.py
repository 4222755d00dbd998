"""The app as an importable WSGI factory: `web.wsgi:app_from_env` (granian loads it by name).

Settings come from the environment (daemon.config.Settings); `worktrain web --standalone`
passes its flag to the server's worker processes as WORKTRAIN_WEB_STANDALONE=1.
"""

from __future__ import annotations

import logging
import os

from flask import Flask

from daemon.config import load_settings

STANDALONE_ENV = "WORKTRAIN_WEB_STANDALONE"


def app_from_env() -> Flask:
    from web.serve import build_app  # web.serve imports gunicorn; only the factory needs it

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return build_app(load_settings(), standalone=os.environ.get(STANDALONE_ENV) == "1")
