"""The per-session lease heartbeat the worker had before the shared loops (issue 12): kept
here only as bench/idle_cost.py's baseline; the worker uses daemon/bus/session/leasebeats.py.

It renews a session's lease from a thread of its own.

It runs beside the agent loop on its own Redis connection, so a model call or a Bash
command that takes minutes never lets the lease lapse; only a dead (or frozen, or cut off)
worker does. It renews every third of the lease and shares the attempt's fence with the
loop (daemon/bus/session/fencing.py): each confirmed renewal extends how long the loop may call the
model and tools without asking Redis. A failed beat (Redis unreachable, a lost reply) is
logged and the next one tries again, however many fail. Only a refusal — the attempt is no
longer the session's — stops it, and the loop, at its next check, stops too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from daemon.bus.session.fencing import Fenced
from daemon.bus.session.steerbus import SessionChannel

log = logging.getLogger(__name__)


class LeaseHeartbeat:
    def __init__(self, channel: SessionChannel, interval_seconds: float) -> None:
        self.channel = channel  # on a client no other thread uses, sharing the loop's fence
        self.interval = max(interval_seconds, 0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{channel.session_id}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.channel.heartbeat()
            except Fenced:
                return  # the fence logged it; the loop's next check raises it too
            except redis.RedisError as exc:
                log.warning("session %s: lease heartbeat failed: %s", self.channel.session_id, exc)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


@contextmanager
def heartbeat_for(channel: SessionChannel, lease_seconds: float) -> Iterator[LeaseHeartbeat]:
    """Renew the lease of `channel` every lease/3 seconds while the block runs."""
    heartbeat = LeaseHeartbeat(channel, lease_seconds / 3)
    heartbeat.start()
    try:
        yield heartbeat
    finally:
        heartbeat.stop()
