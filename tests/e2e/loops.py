"""`asyncio.run` from a sync test, even when this thread already runs an event loop.

The browser tests' Playwright (its sync API, a session-scoped fixture) keeps an event loop
running in the main thread for the rest of the run, where `asyncio.run` refuses to start
another: a coroutine a test drives (an MCP client) runs in a thread of its own instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_own_thread(coroutine: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
    """asyncio.run(coroutine) in a new thread; its result, or its exception re-raised here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(coroutine))
        except BaseException as exc:  # noqa: BLE001 -- handed back to the test's thread
            outcome.append(exc)

    runner = threading.Thread(target=run, name="asyncio-run")
    runner.start()
    runner.join(timeout=timeout)
    assert outcome, f"the coroutine did not end in {timeout:g} s"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    result: T = outcome[0]
    return result
