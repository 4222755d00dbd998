"""What the sentinels say, as each WorkTrain process keeps it: `SentinelWatch`.

Each process keeps one watch per service: a thread subscribed to every sentinel's events
(`+switch-master`, `+promoted-slave`, `+sdown`, ...) that asks the sentinels, at each event
and at least every `POLL_SECONDS`, for the primary (`SENTINEL GET-MASTER-ADDR-BY-NAME`), its
configuration epoch and its replicas, and keeps the answer of the sentinel with the newest
epoch (one that has not heard of a failover yet answers an older one: it never moves the
view back). When the primary it names changes, or a connection meets READONLY (its server
was demoted), every connection of the process to another server is cut at once (issue 41:
before, each dropped only when it met READONLY itself, and a primary cut off from the
sentinels but not from its clients took writes for a whole partition).

`PrimaryConnection` (daemon/host/sentinel.py) connects where the watch says; `Replication`
(daemon/bus/replication.py) asks it whether a server is still the primary and how many
replicas the sentinels could promote (`SentinelView.promotable`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import redis
from redis.sentinel import MasterNotFoundError

from daemon.host.instep import InStep
from daemon.host.sentinelurl import SentinelTarget

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # the sentinels are asked at least this often
LISTEN_SECONDS = 0.1  # how often the watch looks at the sentinels' events
STALE_SECONDS = 5.0  # a view older than this does not vouch for a primary (no sentinel answered)
EVENTS = (
    "+switch-master", "+promoted-slave", "+failover-state-reconf-slaves", "+slave-reconf-done",
    "+sdown", "-sdown", "+odown", "-odown", "+slave", "+convert-to-slave", "+failover-end",
)  # fmt: skip


# --- what the sentinels say ------------------------------------------------------------------


def _fields(reply: Any) -> dict[str, str]:
    """A sentinel's flat `[name, value, ...]` reply (or a dict) as a dict of strings."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    items = [x.decode() if isinstance(x, bytes) else str(x) for x in reply]
    return dict(zip(items[::2], items[1::2], strict=False))


# Sentinel promotes no replica whose INFO it has not had within 3 INFO periods (10 s each)
INFO_VALIDITY_MS = 30_000


@dataclass(frozen=True)
class Replica:
    address: tuple[str, int]
    up: bool  # the sentinels could promote it: not held down, priority above 0, INFO fresh
    master: bool  # it reports the master role (being promoted, or a demoted primary not yet converted)
    linked: bool  # the sentinels' link to it is up (Sentinel promotes none it has no link to)

    @classmethod
    def parse(cls, reply: Any) -> Replica:
        f = _fields(reply)
        flags = set(f.get("flags", "").split(","))
        priority = f.get("slave-priority", f.get("replica-priority", "100"))
        fresh = int(f.get("info-refresh", "0") or 0) <= INFO_VALIDITY_MS
        return cls(
            address=(f.get("ip", ""), int(f.get("port", "0") or 0)),
            # not "disconnected": the sentinels' own link drops for a moment when they promote
            # a replica (they kill its clients), which is exactly when it must still count
            up=not flags & {"s_down", "o_down"} and priority != "0" and fresh,
            master=f.get("role-reported", "slave") == "master",
            linked="disconnected" not in flags,
        )


@dataclass(frozen=True)
class SentinelView:
    """One sentinel's answer: the primary it names, its configuration epoch, its replicas."""

    primary: tuple[str, int]
    epoch: int
    down: bool  # the sentinels agree the primary is down (o_down): no failover yet
    replicas: tuple[Replica, ...]
    at: float  # time.monotonic() when it was read

    @classmethod
    def parse(cls, address: Any, master: Any, replicas: Any) -> SentinelView:
        host, port = (x.decode() if isinstance(x, bytes) else str(x) for x in address)
        state = _fields(master)
        # during a failover the leading sentinel names the promoted replica while its record
        # (and its o_down flag) is still the old primary's
        record = (state.get("ip", host), int(state.get("port", port) or 0))
        return cls(
            primary=(host, int(port)),
            epoch=int(state.get("config-epoch", "0") or 0),
            down="o_down" in state.get("flags", "").split(",") and record == (host, int(port)),
            replicas=tuple(Replica.parse(r) for r in replicas),
            at=time.monotonic(),
        )

    def promotable(self, previous: tuple[str, int] | None = None) -> int:
        """How many of the primary's replicas the sentinels could promote: every one they
        do not hold down and have had INFO from lately (as Sentinel's own choice of a
        replica to promote requires), whatever role it reports (one being promoted away reports master
        and still counts, so that WAIT on the old primary falls short), except the primary
        itself (the leading sentinel lists the replica it promoted until the failover ends)
        and the primary they named before (`previous`) while it still reports master
        (demoted, not yet converted by the sentinels: up to ~10 s after a forced failover)
        or while they have no link to it (killed: they promote no instance they cannot
        reach). Any other replica counts when their link to it drops: they drop it
        themselves for a moment as they promote it."""
        return sum(
            1
            for r in self.replicas
            if r.up
            and r.address != self.primary
            and not (r.address == previous and (r.master or not r.linked))
        )


# --- the watch -------------------------------------------------------------------------------


class SentinelWatch:
    """What the sentinels say about one service, for every connection of this process."""

    def __init__(self, target: SentinelTarget, options: dict[str, Any]) -> None:
        self.target = target
        self.options = options
        self._connections: weakref.WeakSet[InStep] = weakref.WeakSet()
        self._view: SentinelView | None = None
        self._previous: tuple[str, int] | None = None  # the primary named before the current one
        self._sentinels = [redis.Redis(host=h, port=p, **options) for h, p in target.sentinels]
        self._after_fork()

    def _after_fork(self) -> None:
        """Fresh locks and no thread (a forked child has neither its parent's threads nor
        its connections); the last view is kept as a start."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pid: int | None = None
        self._connections = weakref.WeakSet()

    # what connections and Replication ask

    def primary(self) -> tuple[str, int] | None:
        """The primary the sentinels name (None: no sentinel answered). Raises
        MasterNotFoundError while they agree it is down and have not promoted another."""
        self._ensure_running()
        view = self._view
        if view is None or time.monotonic() - view.at > STALE_SECONDS:
            view = self.refresh()
        if view is None:
            return None
        if view.down:
            raise MasterNotFoundError(f"the sentinels hold {view.primary} down for {self.target.service}")
        return view.primary

    def names(self, address: tuple[str, int]) -> bool:
        """Whether the sentinels, asked within STALE_SECONDS, name `address` the primary."""
        view = self._view
        return (
            view is not None
            and not view.down
            and view.primary == address
            and time.monotonic() - view.at <= STALE_SECONDS
        )

    def promotable(self, address: tuple[str, int]) -> int:
        """How many replicas of `address` the sentinels could promote (0: not the primary)."""
        view = self._view
        return view.promotable(self._previous) if view is not None and view.primary == address else 0

    def adopt(self, connection: InStep) -> None:
        with self._lock:
            self._connections.add(connection)

    def demoted(self, address: tuple[str, int]) -> None:
        """A connection met READONLY at `address`: it is no primary now. Every connection of
        the process to it is cut, and the sentinels asked again at once."""
        cut = self._cut(lambda at: at == address)
        log.warning("Redis at %s:%d answered READONLY: cut %d connection(s) to it", *address, cut)
        self._wake.set()

    # the thread

    def refresh(self) -> SentinelView | None:
        """Ask every sentinel; keep the answer with the newest configuration epoch."""
        best: SentinelView | None = None
        for client in self._sentinels:
            try:
                pipe = client.pipeline(transaction=False)
                for command in ("GET-MASTER-ADDR-BY-NAME", "MASTER", "REPLICAS"):
                    pipe.execute_command("SENTINEL", command, self.target.service)  # type: ignore[no-untyped-call]
                address, master, replicas = pipe.execute()
                if address:
                    view = SentinelView.parse(address, master, replicas)
                    best = view if best is None or view.epoch > best.epoch else best
            except (redis.RedisError, ValueError, TypeError) as exc:
                log.debug("sentinel %s did not answer: %s", client, exc)
        if best is not None:
            self._apply(best)
        return best

    def _apply(self, view: SentinelView) -> None:
        with self._lock:
            old = self._view
            if old is not None and view.epoch < old.epoch:
                return  # a sentinel that has not heard of the last failover yet
            self._view = view
            if old is not None and old.primary != view.primary:
                self._previous = old.primary
        if old is not None and (old.primary != view.primary or view.down != old.down):
            log.warning(
                "sentinels for %s: primary %s:%d%s (epoch %d), was %s:%d: cutting this process's "
                "connections to any other",
                self.target.service, *view.primary, " (down)" if view.down else "", view.epoch, *old.primary,
            )  # fmt: skip
        keep = None if view.down else view.primary
        self._cut(lambda at: at != keep)

    def _cut(self, doomed: Any) -> int:
        with self._lock:
            connections = list(self._connections)
        cut = 0
        for connection in connections:
            at = (str(getattr(connection, "host", "")), int(getattr(connection, "port", 0) or 0))
            if getattr(connection, "_sock", None) is not None and doomed(at):
                connection.cut()
                cut += 1
        return cut

    def _ensure_running(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
        threading.Thread(target=self._run, name=f"sentinel-watch-{self.target.service}", daemon=True).start()

    def _run(self) -> None:
        subscriptions: list[Any] = []
        last = 0.0
        while self._pid == os.getpid():
            if not subscriptions:
                subscriptions = self._subscribe()
            heard = False
            for pubsub in list(subscriptions):
                try:
                    while pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0):
                        heard = True
                except (redis.RedisError, OSError, ValueError) as exc:
                    log.debug("sentinel subscription lost: %s", exc)
                    subscriptions.remove(pubsub)
                    with contextlib.suppress(redis.RedisError, OSError):
                        pubsub.close()
            if heard or self._wake.is_set() or time.monotonic() - last >= POLL_SECONDS:
                self._wake.clear()
                last = time.monotonic()
                self.refresh()
            self._wake.wait(LISTEN_SECONDS)

    def _subscribe(self) -> list[Any]:
        subscriptions = []
        for client in self._sentinels:
            try:
                pubsub = client.pubsub()  # type: ignore[no-untyped-call]
                pubsub.subscribe(*EVENTS)
                subscriptions.append(pubsub)
            except (redis.RedisError, OSError) as exc:
                log.debug("could not subscribe to sentinel %s: %s", client, exc)
        return subscriptions


_WATCHES: dict[tuple[Any, ...], SentinelWatch] = {}
_WATCHES_LOCK = threading.Lock()


def watch_for(target: SentinelTarget, options: dict[str, Any]) -> SentinelWatch:
    """The process's one watch of `target`'s service."""
    key = (target.sentinels, target.service, target.sentinel_password)
    with _WATCHES_LOCK:
        if key not in _WATCHES:
            _WATCHES[key] = SentinelWatch(target, options)
        return _WATCHES[key]


def _reset_after_fork() -> None:
    global _WATCHES_LOCK
    _WATCHES_LOCK = threading.Lock()
    for watch in _WATCHES.values():
        watch._after_fork()


os.register_at_fork(after_in_child=_reset_after_fork)
