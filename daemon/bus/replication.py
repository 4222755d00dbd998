"""Acknowledge only what replicas hold (WORKTRAIN_REDIS_WAIT_REPLICAS / _WAIT_MS).

Redis replicates asynchronously: a write answered by the primary can be lost when a replica
is promoted before it arrived (a failover). `WAIT n ms` blocks until n replicas confirm the
asking connection's writes. The write being confirmed may have been made on another pooled
connection, so `confirm()` first INCRs a barrier key on the connection that then WAITs (one
pipelined round trip): the barrier's offset is past every write the primary took before it,
ours included, so n confirmations of the barrier confirm them all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from daemon.bus.keys import Keys

log = logging.getLogger(__name__)


class NotReplicated(redis.ConnectionError):
    """WAIT did not see enough replicas in time: the change may be lost to a failover.
    A ConnectionError: a worker treats it as Redis being unavailable (its attempt stops and
    is resumed), the web tier answers 503 `not_replicated`."""

    def __init__(self, replicas: int, confirmed: int) -> None:
        super().__init__(f"{confirmed} of {replicas} replica(s) confirmed the write in time")
        self.replicas = replicas
        self.confirmed = confirmed


@dataclass(frozen=True)
class Replication:
    client: redis.Redis
    keys: Keys
    replicas: int = 0
    timeout_ms: int = 1000

    @property
    def enabled(self) -> bool:
        return self.replicas > 0

    def confirm(self) -> int:
        """How many replicas hold every write made so far; raises NotReplicated when fewer
        than `replicas` confirm within `timeout_ms`. Free when replicas is 0."""
        if not self.enabled:
            return 0
        pipe = self.client.pipeline(transaction=False)
        pipe.incr(self.keys.replication_barrier)
        pipe.wait(self.replicas, self.timeout_ms)
        confirmed = int(pipe.execute()[1])
        if confirmed < self.replicas:
            raise NotReplicated(self.replicas, confirmed)
        return confirmed

    def confirm_patiently(self, tries: int = 3) -> int:
        """`confirm()`, asked again up to `tries` times (a worker about to act on what it
        wrote: a replica catching up after a failover needs a moment)."""
        for attempt in range(1, tries + 1):
            try:
                return self.confirm()
            except NotReplicated as exc:
                if attempt == tries:
                    raise
                log.warning("WAIT: %s; asking again", exc)
        return 0
