"""The lease's clock: one reading both the worker's fence (daemon/bus/session/fencing.py) and the
sandbox launcher (daemon/sandbox/launch.py) take, so a deadline one computes the other can
check. It counts time spent stopped or suspended (CLOCK_BOOTTIME on Linux): a lease in Redis
keeps running while this host sleeps. Imports only `time`: the launcher starts before every
command."""

from __future__ import annotations

import time


def boottime() -> float:
    """Seconds on CLOCK_BOOTTIME where the platform has it, else on the monotonic clock."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()
