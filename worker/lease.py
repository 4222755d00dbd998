"""The lease heartbeat: renews a session's lease from a thread of its own (SPEC §6).

It runs beside the agent loop on its own Redis connection, so a model call or a Bash
command that takes minutes never lets the lease lapse; only a dead (or frozen) worker
does. It renews every third of the lease. When it finds another worker holding the lease
it stops and says so; the loop's next fenced call raises LeaseLost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from daemon.bus import SessionChannel

log = logging.getLogger(__name__)


class LeaseHeartbeat:
    def __init__(self, channel: SessionChannel, interval_seconds: float) -> None:
        self.channel = channel  # on a bus whose client no other thread uses
        self.interval = max(interval_seconds, 0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{channel.session_id}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if not self.channel.heartbeat().owned:
                    # The loop's next fenced call raises LeaseLost and ends this attempt.
                    log.warning("session %s: the lease is held by another worker", self.channel.session_id)
                    return
            except redis.RedisError as exc:
                # Keep trying: a short Redis outage must not stop the heartbeat for good.
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
