"""Redis connections as WorkTrain opens them, and the embedded server `worktrain up` starts."""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry


def connect(url: str, *, decode: bool = True, socket_timeout: float | None = 5.0) -> redis.Redis:
    """A client that reconnects by itself: retries with backoff on connection errors.

    Timeouts are not retried: a script that timed out may have run, and running accept
    twice would accept a steer twice (a coordinator that needs exactly-once across such a
    failure sends a clientMsgId and retries itself). `decode=False` is for RQ, which stores
    pickled bytes.
    """
    return redis.Redis.from_url(
        url,
        decode_responses=decode,
        socket_timeout=socket_timeout,
        socket_connect_timeout=2.0,
        health_check_interval=30,
        retry=Retry(
            ExponentialBackoff(cap=1.0, base=0.05), retries=3, supported_errors=(redis.ConnectionError,)
        ),
    )


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
