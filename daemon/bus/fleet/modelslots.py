"""The fleet-wide cap on model calls in flight (WORKTRAIN_MAX_MODEL_CALLS, docs/DEVELOPING.md).

An organisation's rate limit is shared by every worker on every host, so the cap is a
semaphore in the Redis they share: `slot_acquire.lua` / `slot_release.lua` (daemon/bus/lua/,
keys in daemon/bus/keys.py `SlotKeys`, docs/redis.md). A slot is held only during a call and
carries an expiry: a holder that dies (kill -9, a lost host) stops renewing it and the slot
comes back within a lease. Waiting is a line served in arrival order (tickets), so no
session starves. Each acquire and each release is one round trip.

A release publishes the tokens first in line for the slots it freed; one listener thread
per `ModelSlots` (per worker process) wakes exactly those waiters, so a slot passes from
one call to the next in about a millisecond instead of a polling interval, and waiting
costs no round trips. A waiter still asks again now and then (a message lost to a
reconnect, a dead holder's slot that expired: nobody announces those).

`ModelSlots` is built once per worker process and may be shared by its sessions: one
keeper thread renews every slot the process holds, every third of the slot's lifetime, in
one pipelined round trip. The waiting itself (watching for a cancel) is the caller's:
daemon/agent/modelcall.py.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from daemon.bus.keys import SlotKeys
from daemon.bus.replies import SlotAnswer
from daemon.bus.scripts import SLOT_ACQUIRE, SLOT_RELEASE, Registered
from daemon.host.redisconn import as_text

log = logging.getLogger(__name__)

WAIT_TTL_SECONDS = 5.0  # a place in line is kept this long without asking again
LISTEN_SECONDS = 1.0  # the listener's read timeout: how soon it notices nobody waits any more


def call_token(session_id: str) -> str:
    """A model call's id in the semaphore: the session it is for, and a random part."""
    return f"{session_id}:{uuid.uuid4().hex[:12]}"


class ModelSlots:
    """`limit` slots shared by every worker on the same Redis and prefix."""

    def __init__(
        self,
        client: redis.Redis,
        keys: SlotKeys,
        limit: int,
        ttl_seconds: float = 30.0,
        wait_ttl_seconds: float = WAIT_TTL_SECONDS,
    ) -> None:
        if limit < 1:
            raise ValueError("a model-call cap needs at least one slot")
        self.client = client
        self.keys = keys
        self.limit = limit
        self.ttl_ms = max(int(ttl_seconds * 1000), 1)
        self.wait_ms = max(int(wait_ttl_seconds * 1000), 1)
        self._acquire = Registered(SLOT_ACQUIRE, client)
        self._release = Registered(SLOT_RELEASE, client)
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self._waiting: dict[str, threading.Event] = {}
        self._keeper: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._closed = threading.Event()

    def try_acquire(self, token: str) -> SlotAnswer:
        """Take a slot, or take (or keep) a place in line: one round trip."""
        answer = self._acquire(self.keys.all(), [token, self.limit, self.ttl_ms, self.wait_ms, "take"])
        if answer.held:
            self._keep(token)
        return answer

    def release(self, token: str) -> bool:
        """Give the slot back (or leave the line): one round trip. True if it was held."""
        with self._lock:
            self._held.discard(token)
        args: list[str | int] = [token, self.limit, self.keys.released]
        return self._release(self.keys.all(), args)

    @contextmanager
    def holding(self, token: str) -> Iterator[None]:
        """Release the slot `token` holds when the block ends (a failed release is logged:
        the slot comes back by itself when it expires)."""
        try:
            yield
        finally:
            try:
                self.release(token)
            except redis.RedisError as exc:
                log.warning(
                    "model slot %s not released (it expires within %d ms): %s", token, self.ttl_ms, exc
                )

    @contextmanager
    def waiting(self, token: str) -> Iterator[threading.Event]:
        """An event set when a release names `token` as next in line (or the listener has
        just (re)subscribed and cannot know what it missed): time to ask again."""
        woken = threading.Event()
        with self._lock:
            self._waiting[token] = woken
            if self._listener is None or not self._listener.is_alive():
                self._listener = threading.Thread(target=self._listen, name="model-slots-listen", daemon=True)
                self._listener.start()
        try:
            yield woken
        finally:
            with self._lock:
                self._waiting.pop(token, None)

    def in_flight(self) -> list[tuple[str, float]]:
        """(token, expiry ms) of the slots held now, by Redis' records (redis-cli's view)."""
        pairs: list[tuple[Any, float]] = self.client.zrange(self.keys.holders, 0, -1, withscores=True)  # type: ignore[assignment]
        return [(as_text(token), float(score)) for token, score in pairs]

    def close(self) -> None:
        """Stop the keeper and the listener (before the client is closed under them)."""
        self._closed.set()
        with self._lock:
            threads = [t for t in (self._keeper, self._listener) if t is not None]
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(LISTEN_SECONDS + 1)

    # --- the listener: wakes the waiters a release names ---

    def _listen(self) -> None:
        """Until nobody waits (the next waiter starts it again) or `close()`."""
        while not self._closed.is_set():
            pubsub = self.client.pubsub()  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(self.keys.released)
                if not self._relay(pubsub):
                    return
            except redis.RedisError as exc:  # a reconnect: the waiters' own asking covers the gap
                log.warning("model slots: the release channel failed (%s); listening again", exc)
                self._closed.wait(LISTEN_SECONDS)
            finally:
                pubsub.close()

    def _relay(self, pubsub: Any) -> bool:
        """Wake the named waiters; False once nobody waits."""
        while not self._closed.is_set():
            message = pubsub.get_message(timeout=LISTEN_SECONDS)
            with self._lock:
                if not self._waiting:
                    self._listener = None
                    return False
                if message is None:
                    continue
                if message.get("type") == "subscribe":  # what was published before is unknown
                    named = list(self._waiting)
                else:
                    named = as_text(message.get("data") or "").split()
                for token in named:
                    if token in self._waiting:
                        self._waiting[token].set()
        return False

    # --- the keeper: renews every slot this process holds ---

    def _keep(self, token: str) -> None:
        with self._lock:
            self._held.add(token)
            if self._keeper is None or not self._keeper.is_alive():
                self._keeper = threading.Thread(target=self._renew_forever, name="model-slots", daemon=True)
                self._keeper.start()

    def _renew_forever(self) -> None:
        """Every third of a slot's life, until no slot is held (the next hold starts it again)."""
        while not self._closed.wait(self.ttl_ms / 3000):
            with self._lock:
                tokens = sorted(self._held)
                if not tokens:
                    self._keeper = None
                    return
            try:
                self.renew(tokens)
            except redis.RedisError as exc:  # keep trying: the next beat may reach Redis
                log.warning("model slots not renewed: %s", exc)

    def renew(self, tokens: list[str]) -> list[str]:
        """Renew the slots of `tokens` in one round trip; returns those no longer held."""
        try:
            answers = self._renew_all(tokens)
        except redis.exceptions.NoScriptError:  # a restarted or flushed Redis: load it again
            self._acquire.load()
            answers = self._renew_all(tokens)
        lost = [token for token, answer in zip(tokens, answers, strict=True) if not answer.held]
        with self._lock:
            expired = self._held.intersection(lost)
            self._held.difference_update(lost)
        for token in sorted(expired):
            log.warning("model slot %s expired while its call ran (its renewals came too late)", token)
        return lost

    def _renew_all(self, tokens: list[str]) -> list[SlotAnswer]:
        pipe = self.client.pipeline(transaction=False)
        for token in tokens:
            args: list[str | int] = [token, self.limit, self.ttl_ms, self.wait_ms, "renew"]
            self._acquire.queue_evalsha(pipe, self.keys.all(), args)
        return [self._acquire.decode(raw) for raw in pipe.execute()]
