"""Redis connections that never read a reply out of step, and pools that lend one connection
to a whole step (`pinning`).

A reply must be read by the command that asked for it. redis-py drops a connection whose
read failed only when its caller asks it to (`read_response(disconnect_on_error=...)`), and
redis-py 8.1's Sentinel connection asks not to: `SentinelManagedConnection.read_response`
defaults `disconnect_on_error` to False (8.2.0 changed that default to True). A timeout is
no retried error, so the pool lent that connection again with the late reply still on its
way, and every later reply on it was one behind (`GET k` answered `'OK'`, `INCR n`
answered `'value-of-k'`; issue 41). So every connection class WorkTrain makes
(`InStep`, mixed into the plain, TLS, Unix-socket and Sentinel classes):

- drops itself on any failed read (a timeout, a broken socket, a parser error, an
  exception raised into the read), whatever its caller asks;
- counts the replies it owes (commands sent whose reply it has not read). A pool that
  lends it again while it still owes one (its borrower left between send and read: a
  timeout on another path, an exception from a signal handler) gets it reconnected first
  (`connect`, which every pool calls before lending), so nobody reads another's reply.
  A subscribed connection (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, MONITOR) reads pushes, not
  replies: it is not counted;
- answers a reply that says "no writable primary here" (READONLY, NOREPLICAS,
  MASTERDOWN, also out of a Lua script) with `OutageReply`, a ConnectionError, after
  dropping itself: a patient (worker) client retries it on a fresh connection, which asks
  the sentinels again, and the web tier answers 503.

`pinning()` opens a step (one HTTP change, one worker write that WAIT must confirm): while
it is open, each `PinningPool` lends the thread one and the same connection for every
command, so that `daemon/bus/replication.py` runs WAIT on the connection that made the
write (a pool otherwise lends any idle connection, possibly one to another server).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.connection import UnixDomainSocketConnection
from redis.utils import SENTINEL

log = logging.getLogger(__name__)

SUBSCRIBING = frozenset({"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR"})
# Replies that mean "no writable primary here right now": a failover, a replica, a primary
# that lost its replicas (min-replicas-to-write), a Redis still loading its data.
OUTAGE_REPLIES = ("READONLY", "NOREPLICAS", "LOADING", "MASTERDOWN")


class OutageReply(redis.ConnectionError):
    """Redis answered that it is no writable primary (READONLY, NOREPLICAS, MASTERDOWN,
    LOADING): the connection was dropped; a retry asks where the primary is again."""


def is_outage_reply(exc: BaseException) -> bool:
    """A reply naming an outage, also when it comes out of a Lua script
    (`... -NOREPLICAS Not enough good replicas ...`, `... READONLY You can't write ...`)."""
    if isinstance(exc, redis.exceptions.ReadOnlyError | redis.exceptions.MasterDownError):
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)
    code = getattr(exc, "status_code", None)  # redis-py strips a known error code from the text
    return code in OUTAGE_REPLIES or any(
        text.startswith(word) or f"-{word}" in text or f" {word} " in text for word in OUTAGE_REPLIES
    )


def _command_name(args: tuple[Any, ...]) -> str:
    if not args:
        return ""
    first = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    return first.split(" ", 1)[0].upper()


class InStep:
    """Mixed in front of a redis-py connection class (see the module docstring)."""

    owed: int = 0  # replies owed: commands sent, replies not yet read
    _batch: int = 0  # commands in the send being made (pack_commands: a pipeline's count)
    _subscribed: bool = False

    def pack_command(self, *args: Any) -> Any:
        self._batch = 1
        return super().pack_command(*args)  # type: ignore[misc]

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        self._batch = len(commands)
        return super().pack_commands(commands)  # type: ignore[misc]

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        if _command_name(args) in SUBSCRIBING:
            self._subscribed = True
        self._batch = 1
        super().send_command(*args, **kwargs)  # type: ignore[misc]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        # taken before the send: its health check (a PING) sends and reads on its own
        batch, self._batch = self._batch, 0
        super().send_packed_command(command, check_health)  # type: ignore[misc]
        self.owed += batch

    def read_response(
        self,
        disable_decoding: bool = False,
        *,
        timeout: Any = SENTINEL,
        disconnect_on_error: bool = True,
        push_request: bool = False,
    ) -> Any:
        try:
            response = super().read_response(  # type: ignore[misc]
                disable_decoding=disable_decoding,
                timeout=timeout,
                disconnect_on_error=True,  # whatever the caller asked: a failed read is never in step
                push_request=push_request,
            )
        except redis.ResponseError as exc:  # a whole error reply was read: still in step
            self._settled()
            if is_outage_reply(exc):
                self.disconnect()
                self.outage(exc)
                raise OutageReply(str(exc)) from exc
            raise
        except BaseException:
            self.disconnect()  # redis-py did already, unless its caller asked it not to
            raise
        self._settled()
        return response

    def outage(self, exc: BaseException) -> None:
        """Told of an outage reply before it is raised (the Sentinel class acts on READONLY)."""

    def connect(self) -> None:
        """Every pool calls this before it lends the connection: one that still owes a reply
        is made anew rather than lent out of step."""
        self.drop_if_owing()
        super().connect()  # type: ignore[misc]

    def drop_if_owing(self) -> None:
        if self.owed and not self._subscribed and getattr(self, "_sock", None) is not None:
            log.warning("a Redis connection owed %d reply(ies) when lent again: reconnecting", self.owed)
            self.disconnect()

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        super().disconnect(*args, **kwargs)  # type: ignore[misc]
        self.owed = 0
        self._subscribed = False

    def _settled(self) -> None:
        if not self._subscribed and self.owed > 0:
            self.owed -= 1

    def cut(self) -> None:
        """From any thread: end this connection's socket without touching its parser (its
        owner may be reading): a blocked read wakes with an error, and a pool that lends it
        finds it closed and reconnects."""
        sock = getattr(self, "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class InStepConnection(InStep, redis.Connection):
    pass


class InStepSSLConnection(InStep, redis.SSLConnection):
    pass


class InStepUnixConnection(InStep, UnixDomainSocketConnection):
    pass


def connection_class_for(url: str) -> type[redis.Connection] | type[UnixDomainSocketConnection]:
    """The InStep class for a plain URL's scheme (redis://, rediss://, unix://)."""
    scheme = url.split("://", 1)[0].lower()
    if scheme == "rediss":
        return InStepSSLConnection
    if scheme == "unix":
        return InStepUnixConnection
    return InStepConnection


# --- pinning: one connection for a whole step ---------------------------------------------


@dataclass
class Pin:
    """The connection one pool lends a step, and the socket it had when first lent."""

    pool: Any
    connection: Any = None
    socket: Any = None

    @property
    def steady(self) -> bool:
        """Still connected with the socket it was first lent with (not re-made meanwhile:
        a write before a reconnect and a WAIT after it would be on two servers, or two
        replication streams)."""
        return self.connection is not None and getattr(self.connection, "_sock", None) is self.socket

    @property
    def address(self) -> tuple[str, int]:
        return (str(self.connection.host), int(self.connection.port))


@dataclass
class PinScope:
    pins: dict[int, Pin] = field(default_factory=dict)

    def used(self) -> list[Pin]:
        """The pins whose pool lent a connection in this step."""
        return [pin for pin in self.pins.values() if pin.connection is not None]


_SCOPE: contextvars.ContextVar[PinScope | None] = contextvars.ContextVar("worktrain_pin_scope", default=None)


@contextlib.contextmanager
def pinning() -> Iterator[PinScope]:
    """A step: every PinningPool lends this thread one connection until the step ends (then
    each goes back to its pool). Nested steps share the outer one."""
    outer = _SCOPE.get()
    if outer is not None:
        yield outer
        return
    scope = PinScope()
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)
        for pin in scope.used():
            pin.pool.release_pinned(pin.connection)


class PinningPool:
    """Mixed in front of a redis-py pool class: inside `pinning()`, lends the same connection."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        scope = _SCOPE.get()
        if scope is None:
            return super().get_connection(*args, **kwargs)  # type: ignore[misc]
        pin = scope.pins.setdefault(id(self), Pin(self))
        if pin.connection is None:
            pin.connection = super().get_connection(*args, **kwargs)  # type: ignore[misc]
            pin.socket = getattr(pin.connection, "_sock", None)
        else:
            pin.connection.connect()  # as a pool does before each lending (a dropped one reconnects)
        return pin.connection

    def release(self, connection: Any) -> None:
        scope = _SCOPE.get()
        pin = scope.pins.get(id(self)) if scope is not None else None
        if pin is not None and connection is pin.connection:
            return  # lent for the whole step: it goes back when the step ends
        super().release(connection)  # type: ignore[misc]

    def release_pinned(self, connection: Any) -> None:
        super().release(connection)  # type: ignore[misc]


class InStepPool(PinningPool, redis.ConnectionPool):
    pass


class InStepBlockingPool(PinningPool, redis.BlockingConnectionPool):
    pass
