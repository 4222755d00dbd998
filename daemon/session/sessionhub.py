"""What the sessions of one worker process share on Redis: one heartbeat loop, one waiter.

`SessionHub.attend(channel)` wraps one attempt while it runs: its lease is renewed by the
process's `LeaseBeats` (one pipelined round trip for every session, daemon/bus/session/leasebeats.py)
and the loop gets a `HubChannel`, the same fenced channel whose two waiting calls go
through the hub instead of a connection of their own:

- `wait_for_steers(cursor, timeout)` waits on the session's wake-up event, which the
  process's `JournalWaiter` sets when its journal grows (one XREAD for every idle session,
  daemon/bus/session/journalwaiter.py) and `LeaseBeats` sets when a beat reports a cancel or steers in
  flight. While it waits the session is beaten every tick.
- `heartbeat()` answers from the beat the loop sent within the last tick and a half, if
  there is one (an idle session's, between two slices of its wait), else asks Redis.

So an idle session costs no round trip of its own per second, and holds no connection.
The agent loop (daemon/agent/loop.py) does not know: it calls the channel it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from daemon.bus.session.journalwaiter import JournalWaiter
from daemon.bus.session.leasebeats import Beat, LeaseBeats
from daemon.bus.session.steerbus import LeaseCheck, SessionChannel


class HubChannel(SessionChannel):
    """One attempt's channel whose idle wait and heartbeat go through the process's hub."""

    def __init__(self, channel: SessionChannel, hub: SessionHub, beat: Beat) -> None:
        super().__init__(
            channel.bus, channel.session_id, channel.worker_id, channel.lease_ms, client=channel.client
        )
        self.adopt_attempt(channel)  # one fence and interrupt flag for the loop and the beats
        self.hub = hub
        self.beat = beat

    def wait_for_steers(self, cursor: str, timeout_seconds: float) -> bool:
        self._fence().check()
        self.beat.wake.clear()
        self.beat.idle = True
        try:
            return self.hub.waiter.wait(self.keys.journal, cursor, timeout_seconds, self.beat.wake)
        finally:
            self.beat.idle = False

    def heartbeat(self) -> LeaseCheck:
        fresh = self.hub.beats.fresh(self.beat)
        if fresh is None:
            return super().heartbeat()
        self._fence().check()  # a beat that was refused has recorded it
        return fresh


class SessionHub:
    def __init__(self, beats: LeaseBeats, waiter: JournalWaiter) -> None:
        self.beats = beats
        self.waiter = waiter
        self._lock = threading.Lock()
        self._attended: set[SessionChannel] = set()

    @contextmanager
    def attend(self, channel: SessionChannel) -> Iterator[HubChannel]:
        """Renew `channel`'s lease from the shared loop while the block runs."""
        beat = self.beats.add(channel)
        with self._lock:
            self._attended.add(channel)
        try:
            yield HubChannel(channel, self, beat)
        finally:
            with self._lock:
                self._attended.discard(channel)
            self.beats.remove(beat)

    def stop_turns(self) -> int:
        """The process is stopping (its stop event is set): cut every attended session's live
        turn (`TurnInterrupt.stop`: a model call in flight is abandoned), so each loop reaches
        its turn boundary at once, sees the stop and hands its session over (released and
        re-enqueued: the next worker resumes it at once, no lease to wait out). Returns how
        many sessions were attended."""
        with self._lock:
            channels = list(self._attended)
        for channel in channels:
            channel.interrupt.stop()
        return len(channels)

    def close(self) -> None:
        self.beats.close()
        self.waiter.close()
