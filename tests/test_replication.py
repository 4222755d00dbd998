"""daemon/bus/replication.py and the Sentinel view it asks (docs/redis.md, "WAIT: the rule").

On a real primary with one replica: WAIT runs on the connection the step wrote on, counts
what the rule needs (max(n, what the sentinels could promote)), and refuses a step whose
connection was made again, or whose server the sentinels no longer name. A worker's step
that is not confirmed runs again until it is. The view's count is read from replies
recorded from a real SENTINEL FAILOVER (Redis 6.2: the promoted replica reports
`slave,disconnected,promoted` for a moment, then `master`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from daemon.bus import replication as replication_module
from daemon.bus.keys import Keys
from daemon.bus.replication import NotReplicated, Replication
from daemon.host.embedded_redis import RedisServer
from daemon.host.instep import pinning
from daemon.host.redisconn import connect
from daemon.host.sentinelwatch import SentinelView
from tests.crash.sentinels import NO_SYNC_DELAY

pytestmark = pytest.mark.processes

KEYS = Keys("wt")


@dataclass
class Pair:
    primary: RedisServer
    replica: RedisServer


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    primary = RedisServer(tmp_path / "p", extra_args=NO_SYNC_DELAY)
    primary.start()
    replica = RedisServer(tmp_path / "r", extra_args=("--replicaof", "127.0.0.1", str(primary.port)))
    replica.start()
    client = redis.Redis(port=primary.port)
    deadline = time.monotonic() + 20
    while int(client.execute_command("WAIT", 1, 200)) < 1:
        assert time.monotonic() < deadline, "the replica did not sync"
    yield Pair(primary, replica)
    replica.kill()
    primary.kill()


@dataclass
class FakeWatch:
    """What Replication asks a SentinelWatch: who is named, how many could be promoted."""

    named: set[tuple[str, int]] = field(default_factory=set)
    replicas: int = 1

    def names(self, address: tuple[str, int]) -> bool:
        return address in self.named

    def promotable(self, address: tuple[str, int]) -> int:
        return self.replicas if address in self.named else 0


def with_watch(monkeypatch: pytest.MonkeyPatch, watch: FakeWatch | None) -> None:
    monkeypatch.setattr(replication_module, "watch_of", lambda client: watch)


def test_wait_runs_on_the_connection_the_step_wrote_on(pair: Pair) -> None:
    client = connect(pair.primary.url, max_connections=8)
    replication = Replication(client, KEYS, replicas=1, timeout_ms=3000)
    with pinning() as step:
        client.set("k", "v")
        (pin,) = step.used()
        writer = pin.connection.host, pin.connection.port, id(pin.connection)
        assert replication.confirm(step) == 1
        (after,) = step.used()
        assert (after.connection.host, after.connection.port, id(after.connection)) == writer


def test_a_connection_made_again_during_the_step_is_not_confirmed(pair: Pair) -> None:
    client = connect(pair.primary.url)
    replication = Replication(client, KEYS, replicas=1, timeout_ms=3000)
    with pinning() as step:
        client.set("k", "v")
        step.used()[0].connection.disconnect()  # the write's reply came; the socket did not stay
        client.get("k")  # made again: a WAIT now would count another stream's offset
        with pytest.raises(NotReplicated, match="made again"):
            replication.confirm(step)


def test_every_replica_the_sentinels_could_promote_must_confirm(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WAIT_REPLICAS=1, but the sentinels know two promotable replicas: one confirmation is
    not enough (issue 41: WAIT 1 with two replicas lost acknowledged dispatches)."""
    address = ("127.0.0.1", pair.primary.port)
    with_watch(monkeypatch, FakeWatch({address}, replicas=2))
    replication = Replication(connect(pair.primary.url), KEYS, replicas=1, timeout_ms=2000)
    assert replication.need(address) == 2
    with pinning() as step, pytest.raises(NotReplicated, match="1 of 2"):
        replication.client.set("k", "v")
        replication.confirm(step)


def test_a_server_the_sentinels_no_longer_name_is_refused(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write and its WAIT on a primary the sentinels replaced: confirmed by its replica,
    lost at the heal (issue 41's split brain). Refused."""
    with_watch(monkeypatch, FakeWatch({("127.0.0.2", 6379)}))
    replication = Replication(connect(pair.primary.url), KEYS, replicas=1, timeout_ms=2000)
    with pinning() as step, pytest.raises(NotReplicated, match="not the primary the sentinels name"):
        replication.client.set("k", "v")
        replication.confirm(step)


def test_a_workers_step_runs_again_until_a_replica_confirms_it(tmp_path: Path) -> None:
    primary = RedisServer(tmp_path / "p", extra_args=NO_SYNC_DELAY)
    primary.start()
    replica = RedisServer(tmp_path / "r", extra_args=("--replicaof", "127.0.0.1", str(primary.port)))
    try:
        client = connect(primary.url)
        replication = Replication(client, KEYS, replicas=1, timeout_ms=200)
        runs = itertools.count(1)
        threading.Timer(0.8, replica.start).start()  # no replica for the first runs

        def step() -> int:
            client.incr("steps")
            return next(runs)

        ran = replication.confirmed(step)
        assert ran > 1 and int(client.get("steps") or 0) == ran
        refusals = itertools.count()

        def refused() -> None:
            next(refusals)
            raise RuntimeError("fenced")

        replica.kill()
        with pytest.raises(RuntimeError, match="fenced"):
            replication.confirmed(step, may_retry=refused)
    finally:
        replica.kill()
        primary.kill()


# what `SENTINEL REPLICAS wt` answered during a real SENTINEL FAILOVER (Redis 6.2, tests/crash/sentinels.py)
P, R1, R2 = ("127.0.0.1", 40545), ("127.0.0.2", 40349), ("127.0.0.2", 35301)


def replica(
    address: tuple[str, int], flags: str, role: str = "slave", priority: str = "100", info_ms: int = 900
) -> dict[str, str]:
    fields = {"ip": address[0], "port": str(address[1]), "flags": flags, "role-reported": role}
    return {**fields, "slave-priority": priority, "info-refresh": str(info_ms)}


def view(primary: tuple[str, int], *replicas: dict[str, str], epoch: int = 0) -> SentinelView:
    master = {"config-epoch": str(epoch), "flags": "master"}
    return SentinelView.parse([primary[0], str(primary[1])], master, list(replicas))


@pytest.mark.parametrize(
    ("moment", "seen", "promotable"),
    [
        ("before", view(P, replica(R1, "slave"), replica(R2, "slave")), 2),
        ("promoting R1", view(P, replica(R1, "slave,promoted"), replica(R2, "slave")), 2),
        (
            "its link cut by the promotion",
            view(P, replica(R1, "slave,disconnected,promoted"), replica(R2, "slave")),
            2,
        ),
        ("R1 reports master", view(P, replica(R1, "slave,promoted", "master"), replica(R2, "slave")), 2),
        (
            "the leader names R1",
            view(R1, replica(R1, "slave,promoted", "master"), replica(R2, "slave"), epoch=1),
            1,
        ),
        ("after the switch", view(R1, replica(P, "slave", "master"), replica(R2, "slave"), epoch=1), 1),
        (
            "P killed, no INFO yet",
            view(R1, replica(P, "slave", info_ms=10**9), replica(R2, "slave"), epoch=1),
            1,
        ),
        ("P converted", view(R1, replica(P, "slave"), replica(R2, "slave"), epoch=1), 2),
        ("R2 down", view(R1, replica(P, "slave"), replica(R2, "s_down,slave"), epoch=1), 1),
        ("R2 never promoted", view(R1, replica(P, "slave"), replica(R2, "slave", priority="0"), epoch=1), 1),
    ],
)
def test_what_the_sentinels_could_promote(moment: str, seen: SentinelView, promotable: int) -> None:
    """A replica being promoted away still counts (WAIT on the old primary must fall short);
    the demoted primary counts once the sentinels converted it."""
    assert seen.promotable(previous=P if seen.primary == R1 else None) == promotable, moment
