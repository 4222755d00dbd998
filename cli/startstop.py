"""A tier asked to stop while it starts stops at once, and as a stop (exit status 0), not as a
crash (killed by SIGTERM, 143 in a shell, -15 to Popen): daemon/host/startstop.py's handler
until the server takes over, and here the line and the clean exit. Lightweight on purpose:
it is imported before anything else the tier needs.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import click

from daemon.host.startstop import STOP_SIGNALS, raise_on_stop, stop_asked


@contextmanager
def stops_cleanly_while_starting(role: str) -> Iterator[None]:
    """Around a tier's command (a decorator, under click's): a stop asked before its server
    took over ends it with status 0.

    Entered before `seal`, which may re-execute the process (a new image starts with the
    default handlers, and enters this again). Whatever leaves the start once a stop was asked
    is that stop, however Python wrapped it on the way."""
    raise_on_stop()
    try:
        yield
    except BaseException:
        asked = stop_asked()
        if asked is None:
            raise
        for signum in STOP_SIGNALS:  # stopping already: a second ask (an impatient operator) too
            signal.signal(signum, signal.SIG_IGN)
        click.echo(f"worktrain {role}: {asked} while starting: stopped", err=True)
