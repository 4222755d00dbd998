"""Time as the rest of the code sees it: RFC 3339 UTC strings at the edges, a Clock for the loop."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


class Clock(Protocol):
    """What the agent loop needs of time; tests pass a fake to exercise the limits."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        """Wait `seconds`, or less when `wake` is set; True when woken. Never time.sleep:
        every wait of a session can be cut short (a stop, a warm shutdown)."""
        ...


class SystemClock:
    def __init__(self) -> None:
        self._never = threading.Event()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        return (wake or self._never).wait(max(seconds, 0.0))
