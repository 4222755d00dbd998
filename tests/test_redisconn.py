"""daemon/host/redisconn.py: Sentinel URLs, what counts as an outage, keepalive, TLS
warnings, and a leaving worker's fail-fast client on a blocking pool (redis-py 8.1)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest
import redis
from rq.connections import parse_connection

from daemon.host.embedded_redis import RedisServer
from daemon.host.redisconn import (
    KEEPALIVE_OPTIONS,
    connect,
    is_outage,
    pooled_connections,
    verification_disabled,
    warn_if_unreplicated,
    warn_if_unverified,
    where,
)
from daemon.host.sentinel import PrimaryConnection
from daemon.host.sentinelurl import parse_sentinel_url
from tests.crash.sentinels import Sentinels, primary_args
from worker import leaving

pytestmark = pytest.mark.unit


def test_a_sentinel_url_names_sentinels_service_db_and_passwords() -> None:
    target = parse_sentinel_url(
        "redis+sentinel://app:s%40cret@10.0.0.1:26379,10.0.0.2:26380/worktrain/3?sentinel_password=sp&ssl=true"
        "&ssl_ca_certs=/etc/ca.pem"
    )
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (target.service, target.db, target.username, target.password) == ("worktrain", 3, "app", "s@cret")
    assert (
        target.sentinel_password == "sp"
        and target.ssl
        and target.ssl_options == {"ssl_ca_certs": "/etc/ca.pem"}
    )
    assert parse_sentinel_url("redis+sentinel://h:1/svc").db == 0
    assert "cret" not in where("redis+sentinel://a:s3cret@h:1/svc") and "h:1/svc" in where(
        "redis+sentinel://h:1/svc"
    )


@pytest.mark.parametrize(
    "url", ["redis+sentinel://h:1", "redis+sentinel://h/svc", "redis+sentinel://h:1/svc/x"]
)
def test_a_malformed_sentinel_url_is_refused_with_a_sentence(url: str) -> None:
    with pytest.raises(ValueError, match="Sentinel URL"):
        parse_sentinel_url(url)


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (redis.ConnectionError("refused"), True),
        (redis.TimeoutError("slow"), True),
        (redis.exceptions.ReadOnlyError("You can't write against a read only replica."), True),
        (redis.ResponseError("NOREPLICAS Not enough good replicas to write."), True),
        (
            redis.ResponseError("Error running script (call to f_1): @user_script:9: -NOREPLICAS Not enough"),
            True,
        ),
        (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), True),
        (redis.exceptions.MasterDownError("Link with MASTER is down"), True),
        (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
        (ValueError("a bug"), False),
    ],
)
def test_what_is_an_outage(error: Exception, outage: bool) -> None:
    assert is_outage(error) is outage


def test_disabling_tls_verification_warns(caplog: pytest.LogCaptureFixture) -> None:
    assert verification_disabled("rediss://h:6380/0?ssl_cert_reqs=none")
    assert not verification_disabled("rediss://h:6380/0?ssl_ca_certs=/ca.pem")
    assert not verification_disabled("redis://h:6379/0")
    with caplog.at_level(logging.WARNING):
        warn_if_unverified("rediss://h:6380/0?ssl_cert_reqs=none", "worktrain web")
    assert "verification off" in caplog.text and "ssl_ca_certs" in caplog.text


def test_every_connection_has_keepalive(redis_server: RedisServer) -> None:
    client = connect(redis_server.url, max_connections=2)
    client.ping()
    conn = pooled_connections(client)[0]
    sock = conn._sock
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_OPTIONS[socket.TCP_KEEPIDLE]
    client.close()


@pytest.mark.parametrize("max_connections", [None, 4])
@pytest.mark.processes
def test_a_leaving_client_stops_retrying_on_any_pool(tmp_path: Path, max_connections: int | None) -> None:
    """redis-py 8.1's Redis.set_retry raised AttributeError ('BlockingConnectionPool' object
    has no attribute '_available_connections') on a worker's bounded pool, so presence.leave()
    never ran; and the patient client would retry a gone Redis for a minute per command."""
    server = RedisServer(tmp_path / "r")
    server.start()
    client = connect(server.url, patience_seconds=60, max_connections=max_connections)
    client.ping()
    leaving.fail_fast(client)  # raised AttributeError with max_connections (the worker's pool)
    server.kill()
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert time.monotonic() - started < 3, "a leaving client waited for a Redis that is gone"


@pytest.mark.processes
def test_a_blocked_dequeue_follows_a_failover_to_the_new_primary(tmp_path: Path) -> None:
    """redis-py 8.1 reconnected a Sentinel connection cut mid-command to the same host and
    port (redis/redis-py#3874): each retry met the demoted primary's READONLY until the
    patience ran out, so after `SENTINEL FAILOVER` a worker's blocked dequeue stalled for its
    whole 60 s. Here (5 s of patience) the bug raised ConnectionError "The previous master is
    now a slave"; fixed, the retried BLPOP blocks on the new primary and gets the job pushed
    there: through a worker's bounded pool, and through the plain pool RQ's WorkerPool rebuilds
    from it in its children."""
    primary = RedisServer(tmp_path / "primary", extra_args=primary_args(None))
    primary.start()
    (tmp_path / "sentinels").mkdir()
    cluster = Sentinels(tmp_path / "sentinels", primary).start()
    try:
        client = connect(
            cluster.url,
            decode=False,
            socket_timeout=None,
            patience_seconds=5,
            max_connections=4,
        )
        cls, connection_class, kwargs = parse_connection(client)
        rebuilt = cls(connection_pool=redis.ConnectionPool(connection_class=connection_class, **kwargs))
        got: dict[int, object] = {}

        def dequeue(n: int, each: redis.Redis) -> None:
            try:
                got[n] = each.blpop([f"queue-{n}"], timeout=40)
            except redis.RedisError as exc:
                got[n] = exc

        threads = [threading.Thread(target=dequeue, args=pair) for pair in enumerate((client, rebuilt))]
        for thread in threads:
            thread.start()
        cluster.failover()
        cluster.wait_primary()
        host, port = cluster.primary_now()
        new = redis.Redis(host=host, port=port)
        for n in range(2):
            new.rpush(f"queue-{n}", b"job")
        for thread in threads:
            thread.join(45)
        assert got == {n: (f"queue-{n}".encode(), b"job") for n in range(2)}
    finally:
        cluster.stop()
        primary.kill()


@pytest.mark.parametrize("max_connections", [None, 4])
def test_a_sentinel_client_makes_primary_connections_tls_included(max_connections: int | None) -> None:
    for url, tls in (
        ("redis+sentinel://127.0.0.1:1/svc", False),
        ("rediss+sentinel://127.0.0.1:1/svc", True),
    ):
        pool = connect(url, max_connections=max_connections).connection_pool
        made = pool.make_connection()
        assert isinstance(made, PrimaryConnection)
        assert isinstance(made, redis.SSLConnection) is tls, url


@pytest.mark.processes  # a primary, its replica and three sentinels of its own
def test_a_switch_cuts_every_connection_to_the_old_primary_at_once(tmp_path: Path) -> None:
    """After SENTINEL FAILOVER the old primary stays a writable primary until the sentinels
    convert it (about 10 s): a connection a process held to it kept writing there (lost at
    the conversion) or blocked there. The process's watch cuts them at the switch: a
    blocked BLPOP fails at once and an idle pooled connection is closed before it is lent."""
    primary = RedisServer(tmp_path / "primary", extra_args=primary_args(None))
    primary.start()
    (tmp_path / "sentinels").mkdir()
    cluster = Sentinels(tmp_path / "sentinels", primary).start()
    try:
        client = connect(cluster.url, socket_timeout=None)
        idle = client.connection_pool.get_connection()
        client.connection_pool.release(idle)
        assert idle.port == primary.port
        failed: list[tuple[float, BaseException]] = []

        def blocked() -> None:
            try:
                client.blpop(["never"], timeout=60)
            except redis.RedisError as exc:
                failed.append((time.monotonic(), exc))

        thread = threading.Thread(target=blocked)
        thread.start()
        time.sleep(0.3)
        cluster.failover()
        cluster.wait_primary()
        switched = time.monotonic()
        thread.join(30)
        assert failed, "the BLPOP on the old primary never ended"
        at, error = failed[0]
        assert isinstance(error, redis.ConnectionError), error
        assert at - switched < 3.0, f"cut {at - switched:.1f} s after the switch"
        assert idle._sock is None or idle._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        assert client.set("after", "1") and client.connection_pool.get_connection().port != primary.port
    finally:
        cluster.stop()
        primary.kill()


def test_sentinel_without_wait_warns_at_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        warn_if_unreplicated("redis+sentinel://h:1/svc", 0, "worktrain web")
        warn_if_unreplicated("redis+sentinel://h:1/svc", 1, "worktrain web")
        warn_if_unreplicated("redis://h:1/0", 0, "worktrain web")
    assert len(caplog.records) == 1 and "silently loses" in caplog.text
