"""Redis connections as WorkTrain opens them: fail-fast for the web tier, patient for workers.

Every client WorkTrain makes comes from `connect`: a plain `redis://` / `rediss://` URL, or
`redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`, whose every new
connection goes to the primary the process's watch of the sentinels names, and every
connection to a server they no longer name is cut at once, so a process follows a failover
without a restart (daemon/host/sentinel.py, sentinelwatch.py). No connection ever reads a
reply out of step (daemon/host/instep.py); every one has TCP keepalive (a peer gone silent
is noticed in about KEEPALIVE_DETECT_SECONDS) and a read timeout.
"""

from __future__ import annotations

import logging
import socket
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from daemon.host.instep import InStepBlockingPool, InStepPool, connection_class_for, is_outage_reply
from daemon.host.sentinel import sentinel_client
from daemon.host.sentinelurl import is_sentinel_url, parse_sentinel_url

log = logging.getLogger(__name__)

# TCP keepalive: first probe after 5 s idle, then every 2 s, dead after 3 unanswered
KEEPALIVE_OPTIONS = {socket.TCP_KEEPIDLE: 5, socket.TCP_KEEPINTVL: 2, socket.TCP_KEEPCNT: 3}
KEEPALIVE_DETECT_SECONDS = 5 + 2 * 3

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


def warn_if_unreplicated(url: str, wait_replicas: int, who: str) -> None:
    """Said at every start of a process that follows Sentinel failovers without WAIT."""
    if is_sentinel_url(url) and wait_replicas <= 0:
        log.warning(
            "%s: REDIS_URL follows Sentinel failovers but WORKTRAIN_REDIS_WAIT_REPLICAS is 0: a failover "
            "silently loses what the old primary acknowledged and had not replicated yet (steers answered "
            "200, dispatches answered 202, checkpoints), with no error anywhere. Set "
            "WORKTRAIN_REDIS_WAIT_REPLICAS=1 (docs/redis.md, WAIT).",
            who,
        )


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

    Timeouts are never retried (a stalled Redis is not a restarting one), and a connection
    whose read failed is dropped, never lent again with a reply unread (daemon/host/instep.py).
    A reply saying the server is no writable primary (READONLY, NOREPLICAS, MASTERDOWN) is a
    ConnectionError (`OutageReply`): retried by a patient client. `decode=False` is
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
        return sentinel_client(parse_sentinel_url(url), options, max_connections, POOL_WAIT_SECONDS)
    options["connection_class"] = connection_class_for(url)
    if max_connections is None:
        return redis.Redis(connection_pool=InStepPool.from_url(url, **options))
    pool = InStepBlockingPool.from_url(
        url, max_connections=max_connections, timeout=POOL_WAIT_SECONDS, **options
    )
    return redis.Redis(connection_pool=pool)


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


# what a patient (worker) client retries: connection errors, which include a reply saying
# the server is no writable primary (OutageReply: a failover, a replica, NOREPLICAS)
RETRIED_ERRORS: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
)


def is_outage(exc: BaseException) -> bool:
    """Redis unreachable or not a writable primary (an outage, never a bug): connection
    errors, timeouts, and READONLY / NOREPLICAS / LOADING / MASTERDOWN replies, also when
    they come out of a Lua script (`... -NOREPLICAS Not enough good replicas ...`)."""
    return isinstance(exc, redis.ConnectionError | redis.TimeoutError) or is_outage_reply(exc)


def on_primary(client: redis.Redis) -> bool:
    """Whether this client reaches a primary (ROLE: one round trip)."""
    role = client.execute_command("ROLE")  # type: ignore[no-untyped-call]
    return as_text(role[0]) == "master"


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
