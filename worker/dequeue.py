"""How long an RQ worker's blocking dequeue may wait: shorter than a lease.

RQ's worker blocks in BLMOVE (queue -> its intermediate list) for `worker_ttl - 15` s (405 s
by default). Redis hands the next job to whichever client blocks first, and it cannot tell
that a client was cut off (a partition, a blackhole: no FIN, no RST): a re-enqueued job went
to a cut host's BLMOVE and sat in the intermediate list for a whole extra lease (measured:
takeover 85 s with a 30 s lease). With the block shorter than half a lease, every BLMOVE of
a host cut off before its sessions' leases lapsed has timed out in Redis by the time the
reaper re-enqueues them, so the job goes to a worker that is there. The read timeout
(RQ sets the connection's socket_timeout to `connection_timeout`) follows it.
"""

from __future__ import annotations

from functools import cache

from daemon.host.config import load_settings

READ_MARGIN_SECONDS = 5  # a BLMOVE's reply may take this long past its timeout before the socket gives up
RQ_DEFAULT_BLOCK_SECONDS = 405


def block_seconds(lease_seconds: float) -> int:
    """Half a lease, whole seconds (BLMOVE's timeout), at least 1."""
    return max(1, min(int(lease_seconds / 2), RQ_DEFAULT_BLOCK_SECONDS))


@cache
def _lease_seconds() -> float:
    return load_settings().lease_seconds


class LeaseBoundDequeue:
    """Mixed into WorkTrain's RQ worker classes (before RQ's own)."""

    @property
    def dequeue_timeout(self) -> int:
        return block_seconds(_lease_seconds())

    @property
    def connection_timeout(self) -> int:
        return self.dequeue_timeout + READ_MARGIN_SECONDS
