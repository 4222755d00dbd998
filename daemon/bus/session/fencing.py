"""Fencing (docs/durability.md): one attempt's token, and how long its worker may trust its own lease.

The claim assigns the attempt number; every worker-side Lua script takes it (with the worker
id) and refuses, writing nothing, when it is not the record's current attempt, the session
is finished, or another holder has the lease (`_common.lua` `fence`). Redis thereby refuses
every write of a stale attempt. What Redis cannot refuse is what the worker does elsewhere:
a model call, a tool call. For those the worker trusts its lease only for
`TRUST_FRACTION` of its length after the last renewal Redis confirmed (measured from when
that renewal was *sent*, on a clock that keeps running while the process is stopped or the
host sleeps): no other attempt can have claimed the session before the lease ran out, so a
call made inside that window is not a stale one. Past it — after a freeze, a partition, a
long GC — `guard()` asks Redis first, and a refusal stops the attempt.

A refusal is final for the attempt: `Fence.refuse` logs one line and every later check
raises `Fenced` without touching Redis.

The local lease deadline (docs/durability.md "v3: fencing reaches every side effect"): the last
renewal Redis confirmed plus the lease, minus a safety margin (`margin_for`). Past it the
attempt starts nothing — no tool, no model request, no event write — until a heartbeat
confirms the lease again (`SessionChannel.guard` asks for one), and a tool still running
is stopped (`Fence.halted`, polled by the running Bash's watcher).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import redis

from daemon.host.boottime import boottime

log = logging.getLogger(__name__)

# The heartbeat renews every third of the lease, so a healthy worker always holds a
# renewal younger than this; past it the worker checks with Redis before acting.
TRUST_FRACTION = 2 / 3
# The deadline's safety margin: a sixth of the lease, at most a second. Redis's own clock
# and the time a reply spends on the wire are what it covers.
MARGIN_FRACTION = 1 / 6
MARGIN_CAP_SECONDS = 1.0

# Refusal reasons, as the scripts answer them: {'fenced', reason}.
FINISHED = "finished"  # the session is finished (or its record expired)
STALE_ATTEMPT = "stale_attempt"  # another attempt claimed the session since
LEASE_LOST = "lease_lost"  # the lease is held by someone else (a reaper's mark, another worker)


CLOCK: Callable[[], float] = boottime  # the sandbox launcher checks deadlines on it too


def margin_for(lease_seconds: float) -> float:
    """The safety margin of the local lease deadline for a lease of `lease_seconds`."""
    return min(lease_seconds * MARGIN_FRACTION, MARGIN_CAP_SECONDS)


class LeaseUnconfirmed(Exception):
    """The attempt's local lease deadline passed and Redis could not confirm the lease (it
    is unreachable): nothing may start. Not final like `Fenced`: the session is left to
    its lease, and the reaper has it resumed if no heartbeat gets through."""

    def __init__(self, session_id: str, attempt: int, cause: str) -> None:
        super().__init__(f"session {session_id} attempt {attempt}: lease past its local deadline ({cause})")
        self.session_id = session_id
        self.attempt = attempt


class Fenced(Exception):
    """Redis refused this attempt (stale attempt, finished session, lease taken): it must stop."""

    def __init__(self, session_id: str, attempt: int, reason: str) -> None:
        super().__init__(f"session {session_id} attempt {attempt} fenced: {reason}")
        self.session_id = session_id
        self.attempt = attempt
        self.reason = reason


class Fence:
    """The fencing state of one attempt, shared by its loop and its heartbeat thread."""

    def __init__(
        self, session_id: str, attempt: int, lease_seconds: float, clock: Callable[[], float] = CLOCK
    ) -> None:
        self.session_id = session_id
        self.attempt = attempt
        self.lease_seconds = lease_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._renewed_at = clock()  # the claim that created the fence renewed the lease
        self._refused: Fenced | None = None
        self.ended = False  # this attempt ended the session itself (finish.lua said ok)

    def now(self) -> float:
        return self.clock()

    def renewed(self, sent_at: float) -> None:
        """Redis confirmed the lease for a request sent at `sent_at` (a `now()` reading)."""
        with self._lock:
            self._renewed_at = max(self._renewed_at, sent_at)

    @property
    def trusted(self) -> bool:
        """Whether the lease is surely still this attempt's without asking Redis."""
        with self._lock:
            return self.clock() - self._renewed_at < self.lease_seconds * TRUST_FRACTION

    @property
    def deadline(self) -> float:
        """The local lease deadline, a `now()` reading: after it nothing new starts."""
        with self._lock:
            return self._renewed_at + self.lease_seconds - margin_for(self.lease_seconds)

    def left(self) -> float:
        """Seconds until the local deadline (negative past it)."""
        return self.deadline - self.clock()

    @property
    def expired(self) -> bool:
        """Past the local deadline: the lease may be another attempt's by now."""
        return self.clock() >= self.deadline

    def halted(self) -> str | None:
        """Why what runs for this attempt must stop now (a refusal, a lapsed deadline), or
        None. Free: no Redis round trip (a running tool's watcher polls it)."""
        refused = self.refused
        if refused is not None:
            return f"fenced: {refused.reason}"
        if not self.ended and self.expired:
            return "lease_expired"
        return None

    @property
    def refused(self) -> Fenced | None:
        with self._lock:
            return self._refused

    def check(self) -> None:
        """Raise `Fenced` if Redis already refused this attempt."""
        refused = self.refused
        if refused is not None:
            raise refused

    def refuse(self, reason: str) -> Fenced:
        """Record Redis's refusal (logged once per attempt) and return the exception to raise."""
        with self._lock:
            first = self._refused is None
            if first:
                self._refused = Fenced(self.session_id, self.attempt, reason)
            refused = self._refused
        assert refused is not None
        if first:
            log.warning("%s: stopping this attempt (no further write, model call or tool call)", refused)
        return refused


class Emits(Protocol):
    def emit(self, *events: Any) -> None: ...


class FencedEmitter:
    """An attempt's events, written only while the attempt may still write (docs/durability.md).

    Event streams are not written by the fenced scripts, so each emit asks the channel's
    guard first (free while the lease is fresh): once the attempt is refused its events are
    dropped, never raised — a tool that emits must not turn the refusal into a tool error;
    the loop's own next check stops it. The closing events of a session this attempt
    finished itself always pass (the guard knows: `Fence.ended`).
    """

    def __init__(self, inner: Emits, guard: Callable[[], None]) -> None:
        self.inner = inner
        self.guard = guard

    def emit(self, *events: Any) -> None:
        try:
            self.guard()
        except Fenced:
            return  # the fence logged the refusal once
        except (redis.RedisError, LeaseUnconfirmed) as exc:  # the check could not reach Redis
            log.warning("%d event(s) not written: the fence check failed: %s", len(events), exc)
            return
        self.inner.emit(*events)
