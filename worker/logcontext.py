"""The session id on every log line of a worker process that runs many sessions at once.

Each session runs in a thread of its own, so a `contextvars.ContextVar` set by the job
(`session_context(session_id)`) is that thread's alone; `SessionFilter`, on the root
handlers, copies it onto every record as `%(session)s` ("-" outside a session: the
worker's own lines, RQ's, the shared loops').
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager

CURRENT_SESSION: contextvars.ContextVar[str] = contextvars.ContextVar("worktrain_session", default="-")
LOG_FORMAT = "%(asctime)s %(process)d %(session)s %(name)s %(levelname)s %(message)s"


class SessionFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.session = CURRENT_SESSION.get()
        return True


def install(root: logging.Logger | None = None) -> None:
    """Add the filter to every handler of the root logger (once), so all loggers' lines
    carry the session id."""
    for handler in (root or logging.getLogger()).handlers:
        if not any(isinstance(f, SessionFilter) for f in handler.filters):
            handler.addFilter(SessionFilter())


@contextmanager
def session_context(session_id: str) -> Iterator[None]:
    token = CURRENT_SESSION.set(session_id)
    try:
        yield
    finally:
        CURRENT_SESSION.reset(token)
