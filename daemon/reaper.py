"""The reaper (SPEC §6): finds sessions whose worker vanished and has them resumed.

Each `worktrain worker` runs one on a timer in its pool's parent process (not with
--burst); a lock key lets one reaper act per interval across all hosts. A session is
orphaned when it is `running` or `waiting` and its lease key has expired: mark_orphan.lua
puts a `reaper:` mark in its place (so the next pass does not enqueue it again) and the
caller's `enqueue_resume` puts a resume job on the queue. RQ's own abandoned-job cleanup is
not used: it can take many minutes (rq #2015, #2236).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from daemon.bus import SteerBus
from daemon.redisconn import as_text

log = logging.getLogger(__name__)


class Reaper:
    def __init__(
        self,
        bus: SteerBus,
        reaper_id: str,
        lease_seconds: float,
        enqueue_resume: Callable[[str], None],
    ) -> None:
        self.bus = bus
        self.reaper_id = reaper_id
        self.lease_ms = int(lease_seconds * 1000)
        self.enqueue_resume = enqueue_resume

    @property
    def interval_seconds(self) -> float:
        """How often to look: a third of the lease, so a dead worker is noticed within lease + 1/3."""
        return max(self.lease_ms / 3000, 0.2)

    def run_once(self) -> list[str]:
        """One pass; returns the ids of the sessions it re-enqueued."""
        client = self.bus.client
        lock_ms = max(int(self.interval_seconds * 1000) - 50, 100)
        if not client.set(self.bus.keys.reaper_lock, self.reaper_id, nx=True, px=lock_ms):
            return []  # another reaper acts in this interval
        resumed: list[str] = []
        for raw in client.zrange(self.bus.keys.active, 0, -1):
            session_id = as_text(raw)
            marked = self.bus.scripts.run(
                "mark_orphan", self.bus.keys.session(session_id), [self.reaper_id, self.lease_ms]
            )
            if int(marked) != 1:
                continue
            log.warning("session %s lost its worker; enqueueing a resume job", session_id)
            try:
                self.enqueue_resume(session_id)
            except redis.RedisError:
                # The mark expires after one lease, so a later pass tries again.
                log.exception("could not enqueue the resume job of %s", session_id)
                continue
            resumed.append(session_id)
        return resumed
