"""A stop (SIGTERM, SIGINT) asked of a process while it starts: raised at once, and
remembered, so that one caught on the way is still carried out.

Starting a tier takes seconds (re-executing without secrets, imports, the sandbox probe, a
worker's preloading), and `docker compose stop`, `worktrain up` or a supervisor may ask in
that time. Until the server installs its own handlers (RQ's pool, granian, gunicorn), the
handler here raises `StoppedWhileStarting`. A handler runs wherever the main thread is, and
Python wraps or drops what some places raise (`__set_name__` wraps it in a RuntimeError, a
`__del__` prints and drops it): hence a BaseException (no `except Exception` takes it), the
flag (`stop_asked`), which whoever runs the start reads as the truth whatever came out, and
`raise_if_stop_asked` just before the server takes the signals over.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_asked: list[str] = []  # the signals' names, in this process (a new image starts empty)


class StoppedWhileStarting(BaseException):
    """SIGTERM or SIGINT came before the process's server took over its signals."""


def note_stop(signum: int) -> str:
    """Remember a stop asked of this process while it starts; returns the signal's name."""
    name = signal.Signals(signum).name
    _asked.append(name)
    return name


def _raise_stop(signum: int, _frame: object) -> None:
    raise StoppedWhileStarting(note_stop(signum))


def raise_on_stop() -> None:
    """From now on, until a server installs its own handlers, a stop raises."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stop)


def stop_asked() -> str | None:
    """The first stop signal this process got while starting, if any."""
    return _asked[0] if _asked else None


def raise_if_stop_asked() -> None:
    """For the last step before a server takes the signals over: a stop that was caught on
    the way (and so did not end the start) ends it here."""
    if asked := stop_asked():
        raise StoppedWhileStarting(asked)
