"""Redis Sentinel as WorkTrain follows it: the connection class that asks the process's
watch (daemon/host/sentinelwatch.py) where the primary is, on every (re)connect, its pools,
and the client `connect` makes of a `redis+sentinel://` URL (daemon/host/sentinelurl.py).

`PrimaryConnection` connects to the primary the watch names (redis-py's own discovery, the
first sentinel that answers, is the fallback when no sentinel answers the watch), and tells
the watch of a READONLY so that every connection of the process to that server is cut.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from daemon.host.instep import InStep, PinningPool
from daemon.host.sentinelurl import SentinelTarget
from daemon.host.sentinelwatch import SentinelWatch, watch_for

log = logging.getLogger(__name__)

DEMOTED = "The previous master is now a slave"  # redis-py's message for READONLY on a primary's connection


# --- connections and pools -------------------------------------------------------------------


class WatchedSentinel(Sentinel):
    """redis-py's Sentinel, carrying the process's watch of the service."""

    def __init__(self, watch: SentinelWatch, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.watch = watch


class PrimaryConnection(InStep, SentinelManagedConnection):
    """A connection to the primary the process's watch names, asked on EVERY (re)connect.

    redis-py 8.1 reconnects a dropped connection from its send path through
    `connect_check_health`, which reuses the last host and port: only `connect()` asks the
    sentinels (redis/redis-py#3874). A connection dropped by "the previous master is now a
    slave" so went back to the demoted primary, again and again, for the whole retry
    patience (tests/test_redisconn.py fails without this)."""

    def _watch(self) -> SentinelWatch | None:
        return getattr(self.connection_pool.sentinel_manager, "watch", None)

    def _primary_address(self) -> tuple[str, int]:
        watch = self._watch()
        named = watch.primary() if watch is not None else None
        address: tuple[str, int] = named or self.connection_pool.get_master_address()
        return address

    def connect(self) -> None:
        self.drop_if_owing()
        if self._sock is not None or not self.connection_pool.is_master:
            super().connect()
            return
        self.retry.call_with_retry(self._connect_to_primary, lambda error: None)

    def _connect_to_primary(self) -> None:
        if self._sock is None:
            self.connect_to(self._primary_address())

    def connect_to(self, address: tuple[str, int]) -> None:
        self.host, self.port = address
        super().connect_check_health(
            check_health=self.connection_pool.check_connection, retry_socket_connect=False
        )
        self._adopted()

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if self._sock is not None or not self.connection_pool.is_master:
            super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)
            return
        self.host, self.port = self._primary_address()
        # one try: the command's own retry comes back here and asks again, rather than
        # retrying a primary that is gone (redis/redis-py#3560)
        super().connect_check_health(check_health=check_health, retry_socket_connect=False)
        self._adopted()

    def _adopted(self) -> None:
        watch = self._watch()
        if watch is not None and self.connection_pool.is_master:
            watch.adopt(self)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        address = (str(self.host), int(self.port))
        try:
            return super().read_response(*args, **kwargs)
        except redis.ConnectionError as exc:
            if str(exc) == DEMOTED and (watch := self._watch()) is not None:
                watch.demoted(address)
            raise

    def outage(self, exc: BaseException) -> None:
        watch = self._watch()
        if watch is not None and "READONLY" in f"{getattr(exc, 'status_code', '')} {exc}":
            watch.demoted((str(self.host), int(self.port)))


class PrimarySSLConnection(PrimaryConnection, redis.SSLConnection):
    pass


class InStepSentinelPool(PinningPool, SentinelConnectionPool):
    pass


class BlockingSentinelConnectionPool(PinningPool, SentinelConnectionPool, redis.BlockingConnectionPool):
    """A Sentinel pool that makes a borrower wait for a free connection (as the plain
    BlockingConnectionPool does) instead of failing at max_connections."""


def sentinel_client(
    target: SentinelTarget, options: dict[str, Any], max_connections: int | None, pool_wait: float
) -> redis.Redis:
    """The primary of `target.service`, found through the process's watch for every new connection."""
    sentinel_options = {
        "socket_timeout": 2.0,
        "socket_connect_timeout": 2.0,
        "socket_keepalive": True,
        "socket_keepalive_options": options.get("socket_keepalive_options"),
        "password": target.sentinel_password,
        "decode_responses": True,
    }
    data_options: dict[str, Any] = {**options, "db": target.db, "username": target.username}
    data_options["password"] = target.password
    data_options["connection_class"] = PrimarySSLConnection if target.ssl else PrimaryConnection
    if target.ssl:
        data_options.update(target.ssl_options)
    watch = watch_for(target, sentinel_options)
    sentinel = WatchedSentinel(watch, list(target.sentinels), sentinel_kwargs=sentinel_options)
    if max_connections is None:
        client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
            target.service, connection_pool_class=InStepSentinelPool, **data_options
        )
        return client
    blocking: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service,
        connection_pool_class=BlockingSentinelConnectionPool,
        max_connections=max_connections,
        timeout=pool_wait,
        **data_options,
    )
    return blocking


def watch_of(client: redis.Redis) -> SentinelWatch | None:
    """The Sentinel watch behind a client made by `sentinel_client` (None for a plain URL)."""
    manager = getattr(client.connection_pool, "sentinel_manager", None)
    return getattr(manager, "watch", None)
