"""Redis connections as WorkTrain opens them: fail-fast for the web tier, patient for workers."""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

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
        "health_check_interval": 30,
        "retry": Retry(
            ExponentialBackoff(cap=BACKOFF_CAP_SECONDS, base=BACKOFF_BASE_SECONDS),
            retries=retries,
            supported_errors=(redis.ConnectionError,),
        ),
    }
    if max_connections is None:
        return redis.Redis.from_url(url, **options)
    pool = redis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=POOL_WAIT_SECONDS, **options
    )
    return redis.Redis(connection_pool=pool)


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
