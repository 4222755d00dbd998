"""Time as the rest of the code sees it: RFC 3339 UTC strings at the edges, a Clock for the loop."""

from __future__ import annotations

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


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()
