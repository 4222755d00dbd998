"""daemon/host/instep.py: no connection WorkTrain makes ever reads a reply out of step.

Issue 41: with a Sentinel URL and redis-py 8.1.0, one read timeout left the connection in
the pool with its reply unread, and every later reply on it was one behind (`GET k`
answered 'OK', `INCR n` answered the value of k): redis-py 8.1's
SentinelManagedConnection.read_response defaults `disconnect_on_error` to False. Here the
server stalls (DEBUG SLEEP) past the client's read timeout, and then every reply of a run
of commands that each have a distinct answer is checked, on each kind of client WorkTrain
makes: plain and bounded pools, Sentinel and bounded Sentinel pools, and the plain pool
RQ's WorkerPool rebuilds in its children from a Sentinel client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from rq.connections import parse_connection

from daemon.host.embedded_redis import RedisServer
from daemon.host.instep import InStep, OutageReply, pinning
from daemon.host.redisconn import connect, pooled_connections
from tests.crash.sentinels import Sentinels, debug_args, primary_args

pytestmark = pytest.mark.processes

TIMEOUT = 0.4  # the clients' read timeout
STALL = 1.2  # DEBUG SLEEP, past it; the sentinels' down-after is longer


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.primary = RedisServer(tmp / "primary", extra_args=(*primary_args(None), *debug_args()))
        self.primary.start()
        (tmp / "sentinels").mkdir()
        self.sentinels = Sentinels(tmp / "sentinels", self.primary, count=1, down_after_ms=8000).start()

    def stall(self, seconds: float = STALL) -> threading.Thread:
        """DEBUG SLEEP on the primary, from a connection of its own; returns at once."""
        other = redis.Redis(port=self.primary.port)
        thread = threading.Thread(target=lambda: other.execute_command("DEBUG", "SLEEP", seconds))
        thread.start()
        time.sleep(0.1)  # the sleep has begun
        return thread

    def stop(self) -> None:
        self.sentinels.stop()
        self.primary.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("instep"))
    yield made
    made.stop()


def rebuilt_by_rq(client: redis.Redis) -> redis.Redis:
    """What RQ's WorkerPool makes of a client in its children (a plain pool, our class)."""
    cls, connection_class, kwargs = parse_connection(client)
    rebuilt: redis.Redis = cls(
        connection_pool=redis.ConnectionPool(connection_class=connection_class, **kwargs)
    )
    return rebuilt


CLIENTS: dict[str, Callable[[Cluster], redis.Redis]] = {
    "plain": lambda c: connect(c.primary.url, socket_timeout=TIMEOUT),
    "plain-bounded": lambda c: connect(c.primary.url, socket_timeout=TIMEOUT, max_connections=2),
    "sentinel": lambda c: connect(c.sentinels.url, socket_timeout=TIMEOUT),
    "sentinel-bounded": lambda c: connect(c.sentinels.url, socket_timeout=TIMEOUT, max_connections=2),
    "sentinel-rebuilt-by-rq": lambda c: rebuilt_by_rq(
        connect(c.sentinels.url, decode=True, socket_timeout=TIMEOUT)
    ),
}


def every_reply_in_step(client: redis.Redis, tag: str) -> None:
    """Thirty commands whose replies all differ, each checked; a pipeline and a script too."""
    for n in range(10):
        assert client.set(f"{tag}:k{n}", f"value-{n}") is True
        assert client.get(f"{tag}:k{n}") == f"value-{n}"
        assert client.incrby(f"{tag}:n", n + 1) == sum(range(1, n + 2))
    pipe = client.pipeline(transaction=True)
    pipe.get(f"{tag}:k3").incrby(f"{tag}:n", 1000).lrange(f"{tag}:none", 0, -1)
    assert pipe.execute() == ["value-3", 1055, []]
    assert client.eval("return ARGV[1] .. '!'", 0, "script") == "script!"


@pytest.mark.parametrize("kind", list(CLIENTS))
def test_a_stall_past_the_read_timeout_leaves_every_later_reply_in_step(cluster: Cluster, kind: str) -> None:
    client = CLIENTS[kind](cluster)
    tag = f"stall-{kind}"
    client.set(f"{tag}:k", "value-of-k")
    stalled = cluster.stall()
    with pytest.raises(redis.TimeoutError):
        client.set(f"{tag}:during", "x")  # its reply ("OK") arrives after the timeout
    stalled.join()
    time.sleep(0.1)  # the late reply is on the socket by now, if the socket is still there
    assert client.get(f"{tag}:k") == "value-of-k"  # issue 41, redis-py 8.1 + Sentinel: 'OK'
    assert client.incr(f"{tag}:n0") == 1  # ... and 'value-of-k'
    every_reply_in_step(client, tag)
    client.close()


@pytest.mark.parametrize("kind", ["plain", "sentinel"])
def test_a_connection_lent_again_while_it_owes_a_reply_is_made_anew(cluster: Cluster, kind: str) -> None:
    """A borrower that left between a send and its read (an exception from a signal handler,
    say) put the connection back with a reply on its way: the next borrower would have
    read it as its own."""
    client = CLIENTS[kind](cluster)
    tag = f"owed-{kind}"
    client.set(f"{tag}:k", "value-of-k")
    pool = client.connection_pool
    connection = pool.get_connection()
    connection.send_command("DEBUG", "SLEEP", 0.3)  # its "OK" comes 0.3 s later, unread
    assert isinstance(connection, InStep) and connection.owed == 1
    pool.release(connection)
    assert client.get(f"{tag}:k") == "value-of-k"  # lent again: reconnected first
    time.sleep(0.4)
    every_reply_in_step(client, tag)


def test_a_replica_answers_an_outage_and_the_connection_is_dropped(tmp_path: Path) -> None:
    """READONLY (here from a replica) is a ConnectionError a patient client retries; the
    connection that met it does not go back to the pool."""
    primary = RedisServer(tmp_path / "p")
    primary.start()
    replica = RedisServer(tmp_path / "r", extra_args=("--replicaof", "127.0.0.1", str(primary.port)))
    replica.start()
    try:
        client = connect(replica.url)
        with pytest.raises(OutageReply, match=r"READONLY|read only"):
            client.set("k", "v")
        assert all(conn._sock is None for conn in pooled_connections(client))
        with pytest.raises(OutageReply):
            client.eval("return redis.call('SET', 'k', 'v')", 0)
    finally:
        replica.kill()
        primary.kill()


def test_a_step_lends_one_connection_for_every_command(cluster: Cluster) -> None:
    client = connect(cluster.primary.url, max_connections=4)
    client.ping()
    with pinning() as step:
        ids = {client.client_id() for _ in range(5)}
        pipe = client.pipeline(transaction=False)
        pipe.client_id()
        ids.update(pipe.execute())
        (pin,) = step.used()
        assert len(ids) == 1 and pin.steady
        pin.connection.disconnect()
        client.ping()  # made again inside the step: no longer steady
        assert not pin.steady
    assert len(pooled_connections(client)) >= 1  # back in the pool
