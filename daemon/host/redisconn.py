"""Redis connections as WorkTrain opens them: fail-fast for the web tier, patient for workers.

Every client WorkTrain makes comes from `connect`: a plain `redis://` / `rediss://` URL, or
`redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]` (redis-py's
Sentinel: each new connection asks the sentinels for the current primary, and a connection
that meets a demoted primary's READONLY drops and asks again, so a process follows a
failover without a restart). Every connection has TCP keepalive (a peer gone silent is
noticed in about KEEPALIVE_DETECT_SECONDS) and a read timeout.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

log = logging.getLogger(__name__)

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
# TCP keepalive: first probe after 5 s idle, then every 2 s, dead after 3 unanswered
KEEPALIVE_OPTIONS = {socket.TCP_KEEPIDLE: 5, socket.TCP_KEEPINTVL: 2, socket.TCP_KEEPCNT: 3}
KEEPALIVE_DETECT_SECONDS = 5 + 2 * 3
SSL_OPTIONS = (
    "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_ca_path", "ssl_check_hostname",
)  # fmt: skip

# How long a worker's command keeps retrying while Redis is unreachable (a restart, a
# failover): long enough to ride out a restart, short enough that a Redis that is gone for
# good fails the attempt (its lease lapses and the reaper has it resumed once Redis is back).
WORKER_PATIENCE_SECONDS = 60.0
BACKOFF_BASE_SECONDS = 0.1
BACKOFF_CAP_SECONDS = 2.0
POOL_WAIT_SECONDS = 30.0  # a bounded pool's borrower waits this long for a free connection


def retries_for(patience_seconds: float) -> int:
    """How many retries of ExponentialBackoff(cap, base) add up to `patience_seconds` of waiting."""
    backoff = ExponentialBackoff(cap=BACKOFF_CAP_SECONDS, base=BACKOFF_BASE_SECONDS)
    retries, waited = 0, 0.0
    while waited < patience_seconds:
        retries += 1
        waited += backoff.compute(retries)
    return retries


@dataclass(frozen=True)
class SentinelTarget:
    """A parsed `redis+sentinel://` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False
    ssl_options: dict[str, str] = field(default_factory=dict)

    def where(self) -> str:
        """The sentinels and service, never a password (safe to print)."""
        return ",".join(f"{h}:{p}" for h, p in self.sentinels) + f"/{self.service}"


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelTarget:
    """`redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`
    (`?sentinel_password=`, `?ssl=true` and `ssl_*` options for TLS to the data nodes)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL (scheme {parts.scheme!r})")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"a Sentinel URL lists host:port pairs; got {item!r}")
        sentinels.append((host.strip("[]"), int(port)))
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError("a Sentinel URL ends in /service or /service/db")
    query = dict(parse_qsl(parts.query))
    ssl = parts.scheme.lower().startswith("rediss") or query.get("ssl", "").lower() in ("1", "true", "yes")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        service=path[0],
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) or None,
        sentinel_password=query.get("sentinel_password") or None,
        ssl=ssl,
        ssl_options={k: v for k, v in query.items() if k in SSL_OPTIONS},
    )


def where(url: str) -> str:
    """Where a URL points, without its password (for messages)."""
    if is_sentinel_url(url):
        return "sentinel " + parse_sentinel_url(url).where()
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}"


def verification_disabled(url: str) -> bool:
    """A TLS URL that turns certificate checks off (`ssl_cert_reqs=none`)."""
    query = dict(parse_qsl(urlsplit(url).query))
    return query.get("ssl_cert_reqs", "").lower() in ("none", "optional") and (
        url.lower().startswith("rediss") or query.get("ssl", "").lower() in ("1", "true", "yes")
    )


def warn_if_unverified(url: str, who: str) -> None:
    """Said at every start of a process whose Redis TLS does not verify the server."""
    if verification_disabled(url):
        log.warning(
            "%s: REDIS_URL turns TLS certificate verification off (ssl_cert_reqs=none): anyone on the "
            "path can impersonate Redis. Give ssl_ca_certs=<CA file> instead (docs/redis.md, TLS).",
            who,
        )


class PrimaryConnection(SentinelManagedConnection):
    """redis-py's Sentinel connection, asking the sentinels for the primary on EVERY reconnect.

    redis-py 8.1 reconnects a dropped connection from its send path through
    `connect_check_health`, which reuses the last host and port: only `connect()` asks the
    sentinels (redis/redis-py#3874). A connection dropped by "the previous master is now a
    slave" so went back to the demoted primary, again and again, for the whole retry
    patience: after a `SENTINEL FAILOVER` a worker's dequeue stalled 60 s (seen in
    tests/crash/test_failover.py; tests/test_redisconn.py fails without this)."""

    def connect_to(self, address: tuple[str, int]) -> None:
        """redis-py's `connect()` path: the sentinels have just named `address`, so the
        connect below does not ask them a second time."""
        self.host, self.port = address
        super().connect_check_health(
            check_health=self.connection_pool.check_connection, retry_socket_connect=False
        )

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if self._sock is not None or not self.connection_pool.is_master:
            super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)
            return
        self.host, self.port = self.connection_pool.get_master_address()
        # one try: the command's own retry comes back here and asks the sentinels again,
        # rather than retrying a primary that is gone (redis/redis-py#3560)
        super().connect_check_health(check_health=check_health, retry_socket_connect=False)


class PrimarySSLConnection(PrimaryConnection, redis.SSLConnection):
    pass


class BlockingSentinelConnectionPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """A Sentinel pool that makes a borrower wait for a free connection (as the plain
    BlockingConnectionPool does) instead of failing at max_connections."""


def connect(
    url: str,
    *,
    decode: bool = True,
    socket_timeout: float | None = 5.0,
    patience_seconds: float = 0.0,
    max_connections: int | None = None,
) -> redis.Redis:
    """A Redis client. Reconnecting is automatic either way: redis-py checks a pooled
    connection before lending it and reconnects one that Redis closed, so a restarted Redis
    is used again as soon as it answers. What differs is a command that fails:

    - `patience_seconds=0` (the web tier): it is not retried. A request fails at once while
      Redis is down (503 `steer_bus_unavailable` + Retry-After, `/readyz` 503), and a script
      whose reply was lost is never run a second time by the client: accept.lua run twice
      would accept one steer twice. The coordinator retries with its clientMsgId instead.
    - `patience_seconds>0` (workers): connection errors are retried with capped exponential
      backoff for about that long, so a session rides out a Redis restart. Every worker-side
      script is safe to run twice (docs/redis.md, "Running a script twice").

    Timeouts are never retried (a stalled Redis is not a restarting one). `decode=False` is
    for RQ, which stores pickled bytes. `max_connections` bounds the pool (a worker process
    shared by many sessions): a thread that finds every connection lent out waits for one
    (up to `POOL_WAIT_SECONDS`) instead of opening more.
    """
    retries = retries_for(patience_seconds) if patience_seconds > 0 else 0
    options: dict[str, Any] = {
        "decode_responses": decode,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": 2.0,
        "socket_keepalive": True,
        "socket_keepalive_options": KEEPALIVE_OPTIONS,
        "health_check_interval": 30,
        "retry": Retry(
            ExponentialBackoff(cap=BACKOFF_CAP_SECONDS, base=BACKOFF_BASE_SECONDS),
            retries=retries,
            supported_errors=RETRIED_ERRORS,
        ),
    }
    if is_sentinel_url(url):
        return _sentinel_client(parse_sentinel_url(url), options, max_connections)
    if max_connections is None:
        return redis.Redis.from_url(url, **options)
    pool = redis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=POOL_WAIT_SECONDS, **options
    )
    return redis.Redis(connection_pool=pool)


def _sentinel_client(
    target: SentinelTarget, options: dict[str, Any], max_connections: int | None
) -> redis.Redis:
    """The primary of `target.service`, found through the sentinels for every new connection."""
    sentinel_options = {
        "socket_timeout": 2.0,
        "socket_connect_timeout": 2.0,
        "socket_keepalive": True,
        "socket_keepalive_options": KEEPALIVE_OPTIONS,
        "password": target.sentinel_password,
        "decode_responses": True,
    }
    data_options: dict[str, Any] = {**options, "db": target.db, "username": target.username}
    data_options["password"] = target.password
    data_options["connection_class"] = PrimarySSLConnection if target.ssl else PrimaryConnection
    if target.ssl:
        data_options.update(target.ssl_options)
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    if max_connections is None:
        client: redis.Redis = sentinel.master_for(target.service, **data_options)  # type: ignore[no-untyped-call]
        return client
    blocking: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service,
        connection_pool_class=BlockingSentinelConnectionPool,
        max_connections=max_connections,
        timeout=POOL_WAIT_SECONDS,
        **data_options,
    )
    return blocking


def pooled_connections(client: redis.Redis) -> list[Any]:
    """Every connection a client's pool made so far (plain or blocking pool, any redis-py)."""
    pool = client.connection_pool
    made = getattr(pool, "_connections", None)  # BlockingConnectionPool
    if made is not None:
        return [conn for conn in made if conn is not None]
    return [*getattr(pool, "_available_connections", []), *getattr(pool, "_in_use_connections", [])]


def stop_retrying(client: redis.Redis) -> None:
    """No more retries of a refused connection on this client (a leaving process's): its
    pool's new connections and every one it made. (redis-py 8.1's `Redis.set_retry` assumes
    a plain pool: on a BlockingConnectionPool it raises AttributeError.)"""
    retry = Retry(NoBackoff(), 0, supported_errors=(redis.ConnectionError,))
    client.connection_pool.connection_kwargs["retry"] = retry
    for conn in pooled_connections(client):
        conn.retry = retry


# Replies that mean "no writable primary here right now": a failover, a replica, a primary
# that lost its replicas (min-replicas-to-write), a Redis still loading its data.
OUTAGE_REPLIES = ("READONLY", "NOREPLICAS", "LOADING", "MASTERDOWN")
# what a patient (worker) client retries: connection errors, and a primary being replaced
RETRIED_ERRORS: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
)


def is_outage(exc: BaseException) -> bool:
    """Redis unreachable or not a writable primary (an outage, never a bug): connection
    errors, timeouts, and READONLY / NOREPLICAS / LOADING / MASTERDOWN replies, also when
    they come out of a Lua script (`... -NOREPLICAS Not enough good replicas ...`)."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)
    if isinstance(exc, redis.exceptions.ReadOnlyError | redis.exceptions.MasterDownError):
        return True
    return any(text.startswith(word) or f"-{word}" in text or f" {word} " in text for word in OUTAGE_REPLIES)


def on_primary(client: redis.Redis) -> bool:
    """Whether this client reaches a primary (ROLE: one round trip)."""
    role = client.execute_command("ROLE")  # type: ignore[no-untyped-call]
    return as_text(role[0]) == "master"


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
