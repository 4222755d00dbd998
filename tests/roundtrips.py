"""Counting Redis round trips from the client side: one `send_packed_command` is one trip."""

from __future__ import annotations

from typing import Any

import redis
from redis.connection import Connection


class CountingConnection(Connection):
    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def counting_client(url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(url, decode_responses=True, connection_class=CountingConnection)
    return redis.Redis(connection_pool=pool)


class RoundTrips:
    """`with RoundTrips() as trips: ...; trips.count` — trips made inside the block."""

    def __enter__(self) -> RoundTrips:
        self.start = CountingConnection.sent
        self.count = 0
        return self

    def __exit__(self, *exc: object) -> None:
        self.count = CountingConnection.sent - self.start
