"""One lease heartbeat loop for every session of a worker process (docs/durability.md, README's
worktrain command).

A process that runs many sessions does not give each its own heartbeat thread and
connection: one thread, every `tick_seconds`, sends the `heartbeat.lua` call of every
session that is due in ONE pipelined round trip (EVALSHA each: fencing stays per session,
each reply is read by that session's own channel, `SessionChannel.answer`). A session is
due every third of the lease while it works (as the per-session heartbeat did) — which keeps
its local lease deadline fresh (daemon/bus/session/fencing.py) —, at every tick while a tool or a model
call of it runs and no subscribed listener of the process hears its cancels (a cancel then
cuts it within a second: `TurnInterrupt.needs_ticks`; with the listener, `cancel.lua`'s
announcement cuts it at once, daemon/bus/session/interruptlistener.py), and at every tick while it
waits idle for a steer: that beat is also what tells its idle wait of a cancel or of steers
some lost reply left in flight, so the idle wait itself needs no round trip per slice
(daemon/session/sessionhub.py).

A reply that refuses an attempt raises `Fenced` for that session alone (its fence records
it; its loop stops at the next check) and wakes it. A failed round trip (Redis down, a lost
reply) is logged and the next tick tries again; every beat is safe to repeat.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from daemon.bus.scripts import HEARTBEAT
from daemon.bus.session.fencing import Fenced
from daemon.bus.session.steerbus import LeaseCheck, SessionChannel, SteerBus

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0  # an idle session's beat: how soon its wait hears of a cancel


@dataclass(eq=False)
class Beat:
    """One attended session: its channel, its wake-up event and its last answer."""

    channel: SessionChannel
    wake: threading.Event = field(default_factory=threading.Event)
    idle: bool = False  # waiting for a steer: beaten every tick
    sent_at: float = -math.inf  # monotonic time of the last beat sent
    check: LeaseCheck | None = None
    checked_at: float = -math.inf  # monotonic send time of the beat that answered `check`


class LeaseBeats:
    """The batched heartbeat of one process's sessions, on one client."""

    def __init__(
        self, bus: SteerBus, client: redis.Redis, lease_seconds: float, tick_seconds: float = TICK_SECONDS
    ) -> None:
        self.bus = bus
        self.client = client
        self.interval = max(lease_seconds / 3, 0.05)
        self.tick = max(min(tick_seconds, self.interval), 0.01)
        self._heartbeat = bus.scripts.registered(HEARTBEAT)
        self._lock = threading.Lock()
        self._beats: set[Beat] = set()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, channel: SessionChannel) -> Beat:
        beat = Beat(channel, sent_at=time.monotonic())  # the claim just renewed the lease
        with self._lock:
            self._beats.add(beat)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-beats", daemon=True)
                self._thread.start()
        return beat

    def remove(self, beat: Beat) -> None:
        with self._lock:
            self._beats.discard(beat)

    def fresh(self, beat: Beat) -> LeaseCheck | None:
        """The last answer for `beat` if its beat was sent within the last tick and a half."""
        check, at = beat.check, beat.checked_at
        return check if check is not None and time.monotonic() - at < self.tick * 1.5 else None

    def close(self) -> None:
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.tick + 5)

    def _run(self) -> None:
        while not self._closed.wait(self.tick):
            try:
                self.run_once()
            except redis.RedisError as exc:  # Redis down or restarting: the next tick retries
                log.warning("lease heartbeats failed: %s", exc)
            except Exception:  # the thread must outlive any bug in one tick
                log.exception("lease heartbeats failed")

    def due(self, now: float) -> list[Beat]:
        with self._lock:
            beats = list(self._beats)
        return [
            b
            for b in beats
            if b.channel.fence is not None
            and b.channel.fence.refused is None
            and (
                b.idle or b.channel.interrupt.needs_ticks or now - b.sent_at >= self.interval - self.tick / 2
            )
        ]

    def run_once(self) -> int:
        """Beat every due session in one round trip; returns how many were beaten."""
        beats = self.due(time.monotonic())
        if not beats:
            return 0
        sent = time.monotonic()
        fence_sent = [b.channel.fence.now() for b in beats if b.channel.fence is not None]
        replies = self._send(beats)
        for beat, reply, sent_at in zip(beats, replies, fence_sent, strict=True):
            beat.sent_at = sent
            self._read(beat, reply, sent_at, sent)
        return len(beats)

    def _send(self, beats: list[Beat]) -> list[Any]:
        """Each beat's raw reply, or the error Redis answered it with."""
        replies = self._pipeline(beats)
        if any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
            self._heartbeat.load(self.client)  # a restarted or flushed Redis
            replies = self._pipeline(beats)
        return replies

    def _pipeline(self, beats: list[Beat]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for beat in beats:
            self._heartbeat.queue_evalsha(pipe, beat.channel.keys.all(), beat.channel.fenced_args())
        return list(pipe.execute(raise_on_error=False))

    def _read(self, beat: Beat, reply: Any, sent_at: float, sent: float) -> None:
        channel = beat.channel
        if isinstance(reply, Exception):
            log.warning("session %s: lease heartbeat failed: %s", channel.session_id, reply)
            return
        try:
            check = channel.heartbeat_answer(self._heartbeat.decode(reply), sent_at)  # an interrupt too
        except Fenced:
            beat.wake.set()  # the fence logged it; the session's next call raises it
            return
        beat.check, beat.checked_at = check, sent
        if beat.idle and (check.cancel_requested or check.steers):
            beat.wake.set()
