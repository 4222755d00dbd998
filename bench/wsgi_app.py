"""The WorkTrain app as a WSGI module, for servers other than `worktrain web` (bench only)."""

from daemon.host.config import load_settings
from web.serve import build_app

app = build_app(load_settings())
