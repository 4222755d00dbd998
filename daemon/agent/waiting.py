"""A live turn that waits — a retry's backoff, a free model slot — and keeps watching its session.

While it waits the turn stays live (steers are accepted for it and delivered at its end),
and the wait ends early, within `CHECK_SECONDS`, when the coordinator cancels (CANCELLED),
when the worker is stopping (RELEASED: a SIGTERM hand-over), or when this attempt is no
longer the session's (the heartbeat raises `Fenced`, daemon/bus/session/fencing.py). One heartbeat
round trip per check answers the fence and the cancel flag at once, and renews the lease.
The sleeping itself is `Clock.sleep`, which a `wake` event (set by a SIGTERM handler, a warm
shutdown) cuts short at once: never `time.sleep`. `waiting_for` shows the reason in the
session record (`waitingFor`). A retry's backoff is also cut short, at once, by an
interrupt steer (`sleep(seconds, interrupt)` raises daemon.turn.interrupt.Interrupted; the
SIGTERM wake is then seen at the next check, within `CHECK_SECONDS`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from daemon.agent.endings import CANCELLED, RELEASED, Ending
from daemon.bus.session.fencing import Fenced
from daemon.bus.session.steerbus import LeaseCheck
from daemon.host.clock import Clock
from daemon.turn.interrupt import Interrupted, TurnInterrupt

log = logging.getLogger(__name__)

CHECK_SECONDS = 0.25  # a cancel during a wait ends the session within about this long


class WatchedChannel(Protocol):
    """What a wait needs of the session's channel (daemon.bus.session.steerbus.SessionChannel)."""

    interrupt: (
        TurnInterrupt  # the live turn's (README's Managing steers): begun by start_turn, ended at its drain
    )

    def heartbeat(self) -> LeaseCheck: ...
    def mark_waiting(self, reason: str | None) -> None: ...
    def guard(self) -> None: ...


class Pause:
    """The waits of one attempt, on its channel."""

    def __init__(
        self,
        channel: WatchedChannel,
        clock: Clock,
        stop: Callable[[], bool],
        wake: threading.Event | None = None,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        self.channel = channel
        self.clock = clock
        self.stop = stop
        self.wake = wake
        self.check_seconds = check_seconds
        self._checked_at = -math.inf

    def check(self, force: bool = False) -> Ending | None:
        """The session's state, read at most every `check_seconds` (unless `force`)."""
        if self.stop() or (self.wake is not None and self.wake.is_set()):
            return RELEASED
        now = self.clock.monotonic()
        if not force and now - self._checked_at < self.check_seconds:
            return None
        self._checked_at = now
        check = self.channel.heartbeat()  # raises Fenced for a stale attempt
        if check.cancel_requested:
            return CANCELLED
        return None

    def sleep(self, seconds: float, interrupt: TurnInterrupt | None = None) -> Ending | None:
        """Wait `seconds`; an Ending when the wait was cut short by a cancel or a stop.
        With `interrupt`, an interrupt of the live turn ends it at once: Interrupted."""
        deadline = self.clock.monotonic() + seconds
        if interrupt is None:
            return self._sleep(deadline, self.wake, None)
        woken = threading.Event()
        with interrupt.watch(woken.set):
            return self._sleep(deadline, woken, interrupt)

    def _sleep(
        self, deadline: float, wake: threading.Event | None, interrupt: TurnInterrupt | None
    ) -> Ending | None:
        while True:
            if interrupt is not None and interrupt.is_set:
                raise Interrupted(interrupt.session_id)
            if ending := self.check():
                return ending
            now = self.clock.monotonic()
            if now >= deadline:
                return None
            due = self._checked_at + self.check_seconds
            self.clock.sleep(max(min(deadline, due) - now, 0.0), wake)

    @contextmanager
    def waiting_for(self, reason: str) -> Iterator[None]:
        """`waitingFor: reason` in the session record for the block's duration."""
        self.channel.mark_waiting(reason)
        try:
            yield
        finally:
            try:
                self.channel.mark_waiting(None)
            except Fenced as exc:  # the attempt is over; whatever raised in the block goes on
                log.info("%s: not clearing waitingFor=%s", exc, reason)
