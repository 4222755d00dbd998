"""One listener per worker process for interrupt steers (README's Managing steers; daemon/turn/interrupt.py).

`accept.lua` publishes `<sessionId> <turnId>` on the Pub/Sub channel `wt:interrupts` when an
interrupt steer lands on a live turn, and `cancel.lua` when it flags a running session's
cancel. The listener holds ONE subscribed connection for the
whole process, whatever the number of sessions it runs (issue 12 runs many per process),
and wakes the session it names — after checking, on an ordinary connection, that the
record's `interruptTurn` still says so (the steer may have been retracted meanwhile).

Pub/Sub is fire-and-forget: a message sent while the listener was reconnecting is lost. So
every (re)subscription reads the flags of every session it watches (one pipeline), and the
heartbeat reports the flags too (daemon/bus/lua/heartbeat.lua): a missed announcement delays an
interrupt or a cancel by at most a heartbeat interval, it never loses one. While it is
subscribed, the sessions it watches are heard (`TurnInterrupt.heard`): their heartbeat need
not come every tick while a model call or a tool runs (daemon/bus/session/leasebeats.py); while it is
not, they are beaten every tick again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from daemon.bus.keys import Keys
from daemon.host.redisconn import as_text
from daemon.turn.interrupt import TurnInterrupt

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # how often the thread looks up from the subscription to notice a stop
RETRY_SECONDS = 1.0  # after a lost connection


class InterruptListener:
    """Subscribes once; `watching(session_id, interrupt)` while an attempt runs."""

    def __init__(self, connect: Callable[[], redis.Redis], keys: Keys) -> None:
        self.connect = connect
        self.keys = keys
        self._watched: dict[str, TurnInterrupt] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.subscribed = threading.Event()  # set while a subscription is confirmed

    def start(self) -> InterruptListener:
        self._thread = threading.Thread(target=self._run, name="interrupt-listener", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=POLL_SECONDS * 4)

    def hears(self) -> bool:
        """Subscribed now: an announcement reaches the sessions it watches."""
        return self.subscribed.is_set()

    @contextmanager
    def watching(self, session_id: str, interrupt: TurnInterrupt) -> Iterator[None]:
        with self._lock:
            self._watched[session_id] = interrupt
        interrupt.heard = self.hears
        try:
            yield
        finally:
            with self._lock:
                if self._watched.get(session_id) is interrupt:
                    del self._watched[session_id]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except redis.RedisError as exc:
                log.warning("interrupt listener: %s; subscribing again in %.0fs", exc, RETRY_SECONDS)
                self._stop.wait(RETRY_SECONDS)

    def _listen(self) -> None:
        client = self.connect()
        pubsub = client.pubsub()  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(self.keys.interrupts)
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=POLL_SECONDS)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    self.resync(client)  # anything announced while we were not listening
                    self.subscribed.set()
                elif message["type"] == "message":
                    self._announced(client, as_text(message["data"]))
        finally:
            self.subscribed.clear()  # its sessions are beaten every tick until it is back
            pubsub.close()
            client.close()

    def _announced(self, client: redis.Redis, data: str) -> None:
        session_id, _, raw_turn = data.partition(" ")
        with self._lock:
            interrupt = self._watched.get(session_id)
        if interrupt is None or not raw_turn.isdigit():
            return  # another process's session (every worker hears every announcement)
        self._wake(client, [(session_id, interrupt)])

    def resync(self, client: redis.Redis) -> None:
        """Wake every watched session whose record says an interrupt waits for its live turn,
        or a cancel was asked for."""
        with self._lock:
            watched = list(self._watched.items())
        if watched:
            self._wake(client, watched)

    def _wake(self, client: redis.Redis, sessions: list[tuple[str, TurnInterrupt]]) -> None:
        pipe = client.pipeline(transaction=False)
        for session_id, _ in sessions:
            pipe.hmget(self.keys.session(session_id).record, "interruptTurn", "turnId", "cancelRequested")
        replies: list[Any] = pipe.execute()
        for (_, interrupt), (flag, live, cancel) in zip(sessions, replies, strict=True):
            if flag is not None and as_text(flag) == as_text(live) and as_text(flag).isdigit():
                interrupt.request(int(as_text(flag)))
            if cancel is not None and as_text(cancel) == "1":
                interrupt.cancel()  # a running tool or model call stops now (docs/durability.md)
