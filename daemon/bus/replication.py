"""Acknowledge only what a failover cannot take back (WORKTRAIN_REDIS_WAIT_REPLICAS / _WAIT_MS).

Redis replicates asynchronously: a write the primary answered is lost when a replica that
does not hold it is promoted. A change is confirmed (docs/redis.md, "WAIT: the rule") when:

1. `WAIT` runs on the very connection that made it, in the same step: the step is a
   `pinning()` scope (daemon/host/instep.py), in which each pool lends one connection for
   every command, and the confirmation INCRs a barrier key then WAITs on each connection
   the step used (one pipelined round trip each). The barrier's offset is past every
   write that server took before it, so it also covers a change made earlier (a retried
   steer answered `duplicate`). Run anywhere else, WAIT could confirm another server's
   stream: after a failover a pool holds connections to the old and the new primary.
2. WAIT counts at least `need` replicas: WORKTRAIN_REDIS_WAIT_REPLICAS, and with Sentinel
   every replica following that primary that the sentinels could promote (up, priority
   above 0), when there are more. Not "n", not a majority: in a forced failover the old
   primary keeps taking writes after the replica being promoted has left it, and the other
   replicas, still attached, acknowledge them (issue 41: WAIT 1 with two replicas lost
   acknowledged dispatches). Whichever replica is promoted, it holds a change all of them
   held; once one has left, WAIT on the old primary falls short and the change is refused.
3. The connection was not re-made during the step (a write before a reconnect and a WAIT
   after it would be on two servers), and, asked after the WAIT, the sentinels still name
   its server the primary.

Otherwise `NotReplicated`: the web tier answers 503 `not_replicated` (a retry with the same
clientMsgId or Idempotency-Key is safe), a worker runs its step again (every worker-side
script is safe to repeat) on the primary the sentinels name, for as long as its lease holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis

from daemon.bus.keys import Keys
from daemon.host.instep import Pin, PinScope, pinning
from daemon.host.sentinel import watch_of
from daemon.host.sentinelwatch import SentinelWatch

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_SECONDS = 0.2  # a worker's step, not confirmed, runs again after this
PATIENCE_SECONDS = 60.0  # ... for at most this long (the attempt's lease bounds it first)


class NotReplicated(redis.ConnectionError):
    """The change may be lost to a failover: too few replicas confirmed it in time, or its
    server is no longer the primary. A ConnectionError: a worker treats it as Redis being
    unavailable, the web tier answers 503 `not_replicated`."""

    def __init__(self, replicas: int, confirmed: int, why: str = "") -> None:
        said = why or f"{confirmed} of {replicas} replica(s) confirmed the write in time"
        super().__init__(said)
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

    @property
    def watch(self) -> SentinelWatch | None:
        return watch_of(self.client)

    def need(self, address: tuple[str, int]) -> int:
        """How many replicas must confirm a change made at `address` (rule 2)."""
        watch = self.watch
        return max(self.replicas, watch.promotable(address)) if watch is not None else self.replicas

    def confirm(self, scope: PinScope | None = None) -> int:
        """Rules 1-3 for every connection `scope` used (none: one the pool lends now);
        returns the fewest replicas any of them counted, raises NotReplicated. Free when
        replicas is 0."""
        if not self.enabled:
            return 0
        pins = scope.used() if scope is not None else []
        if pins:
            return min(self._confirm_on(pin) for pin in pins)
        pool = self.client.connection_pool
        connection = pool.get_connection()
        try:
            return self._confirm_on(Pin(pool, connection, getattr(connection, "_sock", None)))
        finally:
            pool.release(connection)

    def _confirm_on(self, pin: Pin) -> int:
        if not pin.steady:
            raise NotReplicated(self.replicas, 0, "the connection was made again during the step")
        address = pin.address
        self._still_named(address)
        need = self.need(address)
        confirmed = self._barrier_then_wait(pin.connection, need)
        if confirmed < need:
            where = f"{address[0]}:{address[1]}"
            raise NotReplicated(
                need, confirmed, f"{confirmed} of {need} replica(s) of {where} confirmed in time"
            )
        self._still_named(address)
        return confirmed

    def _barrier_then_wait(self, connection: Any, need: int) -> int:
        """INCR the barrier then WAIT for `need` replicas, pipelined on `connection`: how many
        replicas WAIT counted (the INCR's reply, the barrier's new value, is not needed)."""
        barrier = ("INCR", self.keys.replication_barrier)
        connection.send_packed_command(connection.pack_commands([barrier, ("WAIT", need, self.timeout_ms)]))
        connection.read_response()  # the INCR's
        return int(connection.read_response())

    def _still_named(self, address: tuple[str, int]) -> None:
        watch = self.watch
        if watch is not None and not watch.names(address):
            where = f"{address[0]}:{address[1]}"
            raise NotReplicated(self.replicas, 0, f"{where} is not the primary the sentinels name")

    def confirmed(
        self, step: Callable[[], T], may_retry: Callable[[], None] = lambda: None, what: str = ""
    ) -> T:
        """A worker's step (a script that is safe to repeat) and its confirmation, run again
        while they fail to confirm: on the primary the sentinels name by then, for up to
        PATIENCE_SECONDS. `may_retry` raises when the step must not run again (the
        attempt's fence: refused, or past its lease's deadline)."""
        if not self.enabled:
            return step()
        deadline = time.monotonic() + PATIENCE_SECONDS
        while True:
            with pinning() as scope:
                result = step()  # its own errors are the client's to retry (a patient client)
                try:
                    self.confirm(scope)
                    return result
                except (redis.ConnectionError, redis.TimeoutError) as exc:  # NotReplicated, or a cut
                    if time.monotonic() > deadline:
                        raise
                    log.warning("WAIT: %s; %s runs again", exc, what or "the step")
            time.sleep(RETRY_SECONDS)
            may_retry()
