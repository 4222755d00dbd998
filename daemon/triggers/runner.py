"""The triggers' background work (README's Triggers): polls, and queued events whose key's
session has ended. A worker tier's parent process runs one `TriggerRunner`: a thread per
trigger with such work, each taking that trigger's lease in Redis first, so across the
fleet one process polls a trigger (a second host waits; when the holder dies its lease
runs out and another takes over, keeping the schedule, cursor, ETags and rate-limit pause
that live in Redis).

Each tick (a second): renew or take the lease; poll when due (fire each new item version,
then record the poll, fenced by the lease); fire queued events whose key is free.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

import redis

from daemon.bus.fleet.metrics import NULL_RECORDER, TRIGGER_POLLS, MetricsRecorder
from daemon.bus.fleet.triggers import TriggerStore
from daemon.host.clock import epoch_ms
from daemon.triggers.firing import Firing
from daemon.triggers.loading import Trigger, TriggerSet
from daemon.triggers.polling import Fetch, LeaseLost, Poll, asked_from, fetch_http
from daemon.triggers.spec import POLL_EVENTS, as_list

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0
SEEN_KEPT_MS = 86_400_000  # item versions older than the cursor by this leave `seen`


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class TriggerLoop(threading.Thread):
    def __init__(
        self,
        trigger: Trigger,
        store: TriggerStore,
        firing: Firing,
        secret: Callable[[str], str | None],
        lease_ms: int,
        metrics: MetricsRecorder = NULL_RECORDER,
        fetch: Fetch = fetch_http,
        tick_seconds: float = TICK_SECONDS,
    ) -> None:
        super().__init__(name=f"trigger-{trigger.id}", daemon=True)
        self.trigger = trigger
        self.store = store
        self.firing = firing
        self.secret = secret
        self.lease_ms = lease_ms
        self.metrics = metrics
        self.fetch = fetch
        self.tick_seconds = tick_seconds
        self.holder = holder_id()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.tick()
            except redis.RedisError as exc:  # Redis down or restarting: the next tick tries again
                log.warning("trigger %s: %s", self.trigger.id, exc)
            except Exception:  # the thread must outlive any bug in one tick
                log.exception("trigger %s: tick failed", self.trigger.id)
            self.stopped.wait(self.tick_seconds)
        try:
            self.store.let_go(self.trigger.id, self.holder)
        except redis.RedisError as exc:
            log.info("trigger %s: lease not given back (it runs out): %s", self.trigger.id, exc)

    def holds(self) -> bool:
        return self.store.hold(self.trigger.id, self.holder, self.lease_ms)

    def tick(self) -> None:
        if not self.holds():
            return
        spec = self.trigger.spec
        if spec.mode == "poll" and epoch_ms() >= (self.store.state(spec.id).nextPollMs or 0):
            try:
                self.poll()
            except LeaseLost:
                log.info("trigger %s: lease lost mid-poll; another process polls it now", spec.id)
                return
        if spec.whileRunning == "queue":
            self.drain()

    def poll(self) -> None:
        spec = self.trigger.spec
        state = self.store.state(spec.id)
        token = self.secret(spec.tokenEnv) if spec.tokenEnv else None
        now = epoch_ms()
        if not token:
            self._record(state.cursorMs, None, {}, now, "error", f"the variable {spec.tokenEnv} is not set")
            return
        poll = Poll(self.trigger, token, state, self.holds, {}, self.fetch, self.metrics)
        poll.etags = self.store.etags(spec.id, self._first_urls(poll, asked_from(state)))
        outcome = poll.run()
        handled = self.store.seen(spec.id, [e.version[0] for e in outcome.events if e.version])
        for event, seen in zip(outcome.events, handled, strict=True):
            if seen:
                continue
            if not self.holds():
                raise LeaseLost(spec.id)
            self.firing.fire(self.trigger, event)
        self.metrics.count(TRIGGER_POLLS, trigger=spec.id, result=outcome.result)
        self._record(
            outcome.cursor[1] if outcome.cursor else state.cursorMs,
            outcome.cursor,
            outcome.etags,
            outcome.paused_until_ms,
            outcome.result,
            outcome.error,
        )

    def _first_urls(self, poll: Poll, cursor: str | None) -> list[str]:
        spec = self.trigger.spec
        labels = as_list(spec.filter.label)[:1] if spec.filter is not None else []
        kinds = [k for k in spec.events if k in POLL_EVENTS[spec.source]]
        return [poll.provider.listing(spec.api_url, spec.repo or "", k, cursor, labels).url for k in kinds]

    def _record(
        self,
        cursor_ms: int | None,
        cursor: tuple[str, int] | None,
        etags: dict[str, str],
        paused_until_ms: int,
        result: str,
        error: str | None,
    ) -> None:
        spec = self.trigger.spec
        floor = (cursor_ms or 0) - SEEN_KEPT_MS
        recorded = self.store.polled(
            spec.id,
            self.holder,
            cursor=cursor,
            etags=etags,
            next_poll_ms=epoch_ms() + spec.interval * 1000,
            paused_until_ms=paused_until_ms,
            result=result,  # type: ignore[arg-type]
            error=error,
            seen_floor_ms=max(floor, 0),
        )
        if not recorded:
            log.info("trigger %s: poll not recorded: the lease went to another process", spec.id)
        elif error:
            log.warning("trigger %s: poll %s: %s", spec.id, result, error)

    def drain(self) -> None:
        for waiting in self.store.queued(self.trigger.id):
            if self.stopped.is_set() or not self.holds():
                return
            self.firing.fire_queued(self.trigger, waiting)


class TriggerRunner:
    """Every trigger's loop in one process (a worker tier's parent)."""

    def __init__(
        self,
        triggers: TriggerSet,
        store: TriggerStore,
        firing: Firing,
        secret: Callable[[str], str | None],
        lease_ms: int,
        metrics: MetricsRecorder = NULL_RECORDER,
        fetch: Fetch = fetch_http,
    ) -> None:
        self.loops = [
            TriggerLoop(trigger, store, firing, secret, lease_ms, metrics, fetch)
            for trigger in triggers
            if trigger.spec.mode == "poll" or trigger.spec.whileRunning == "queue"
        ]

    def start(self) -> TriggerRunner:
        for loop in self.loops:
            loop.start()
        if self.loops:
            log.info("triggers: %s", ", ".join(loop.trigger.id for loop in self.loops))
        return self

    def stop(self, timeout: float = 2.0) -> None:
        for loop in self.loops:
            loop.stopped.set()
        for loop in self.loops:
            loop.join(timeout)
