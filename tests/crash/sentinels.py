"""A Redis primary, its replicas and three sentinels on loopback, for the failover tests.

Real redis-server processes (the one WORKTRAIN_REDIS_SERVER / PATH picks); the sentinels are
`redis-server <conf> --sentinel` (the bundled 6.2 and Debian's 7.x both have the mode).

With a `proxy` (tests/crash/lossyproxy.py, forwarding to the primary) the cluster knows the
primary by the proxy's address, and the replicas and sentinels bind loopback addresses of
their own (127.0.0.2, 127.0.0.3; Redis 6.2 connects out from its first bind address, 7.x
from `bind-source-addr`), so `proxy.partition(mode, only=CLUSTER_HOSTS)` cuts the primary
off from its replicas and sentinels while its clients (127.0.0.1) still reach it: the split
brain of issue 41. The primary then announces the proxy's port (`replica-announce-port`,
`primary_args`) so that, demoted after the heal, it is one replica to the sentinels, not two.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import redis

from daemon.host.embedded_redis import RedisServer, find_binary, free_port
from tests.crash.lossyproxy import LossyProxy

SERVICE = "wt"
DOWN_AFTER_MS = 1000
LOCAL = "127.0.0.1"
REPLICA_HOST = "127.0.0.2"
SENTINEL_HOST = "127.0.0.3"
CLUSTER_HOSTS = frozenset({REPLICA_HOST, SENTINEL_HOST})


@cache
def server_major() -> int:
    """The major version of the redis-server the tests run (6 for the bundled 6.2)."""
    out = subprocess.run(
        [str(find_binary("redis-server")), "--version"], capture_output=True, text=True
    ).stdout
    match = re.search(r"v=(\d+)\.", out)
    return int(match.group(1)) if match else 6


def debug_args() -> tuple[str, ...]:
    """What lets a local client run DEBUG (SLEEP): off by default from Redis 7 on."""
    return ("--enable-debug-command", "local") if server_major() >= 7 else ()


def source_options(host: str) -> list[tuple[str, str]]:
    """Bind `host`, and connect out from it (6.2 does from its first bind address)."""
    return [("bind", host), *([("bind-source-addr", host)] if server_major() >= 7 else [])]


# Redis 7 syncs diskless and waits 5 s for more replicas first: every server here may serve one
NO_SYNC_DELAY = ("--repl-diskless-sync-delay", "0")


def primary_args(proxy: LossyProxy | None) -> tuple[str, ...]:
    """The primary's own arguments (behind `proxy`: announce the proxy's port)."""
    return (*NO_SYNC_DELAY, *(("--replica-announce-port", str(proxy.port)) if proxy is not None else ()))


@dataclass
class Sentinels:
    tmp: Path
    primary: RedisServer
    proxy: LossyProxy | None = None
    count: int = 2  # replicas
    down_after_ms: int = DOWN_AFTER_MS
    replicas: list[RedisServer] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def replica(self) -> RedisServer | None:
        return self.replicas[0] if self.replicas else None

    @property
    def url(self) -> str:
        hosts = ",".join(f"{self.sentinel_host}:{port}" for port in self.ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    @property
    def replica_host(self) -> str:
        return REPLICA_HOST if self.proxy is not None else LOCAL

    @property
    def sentinel_host(self) -> str:
        return SENTINEL_HOST if self.proxy is not None else LOCAL

    @property
    def primary_address(self) -> tuple[str, int]:
        """Where the cluster knows the first primary (the proxy, when there is one)."""
        return (LOCAL, self.proxy.port if self.proxy is not None else self.primary.port)

    def address_of(self, server: RedisServer) -> tuple[str, int]:
        return (server.host, server.port)

    def start(self) -> Sentinels:
        host, port = self.primary_address
        for n in range(self.count):
            extra = ["--replicaof", host, str(port), *NO_SYNC_DELAY]
            if self.proxy is not None:
                extra += ["--protected-mode", "no", "--replica-announce-ip", REPLICA_HOST]
                extra += [arg for name, value in source_options(REPLICA_HOST) for arg in (f"--{name}", value)]
            replica = RedisServer(self.tmp / f"replica{n}", host=self.replica_host, extra_args=tuple(extra))
            replica.start()
            self.replicas.append(replica)
        for n in range(3):
            self._start_sentinel(n, host, port)
        self.wait_settled()
        return self

    def _start_sentinel(self, n: int, host: str, port: int) -> None:
        sentinel_port = free_port(self.sentinel_host)
        conf = self.tmp / f"sentinel{n}.conf"
        binds = source_options(SENTINEL_HOST) if self.proxy is not None else [("bind", LOCAL)]
        lines = [
            f"port {sentinel_port}",
            *(f"{name} {value}" for name, value in binds),
            "protected-mode no",
            f"dir {self.tmp}",
            f"sentinel monitor {SERVICE} {host} {port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}",
            f"sentinel failover-timeout {SERVICE} 10000",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        conf.write_text("\n".join(lines) + "\n")
        with open(self.tmp / f"sentinel{n}.log", "ab") as log:  # the child keeps its own copy
            command = [str(find_binary("redis-server")), str(conf), "--sentinel"]
            self.processes.append(subprocess.Popen(command, stdout=log, stderr=log))
        self.ports.append(sentinel_port)

    def sentinel(self, n: int = 0) -> redis.Redis:
        return redis.Redis(
            host=self.sentinel_host, port=self.ports[n], decode_responses=True, socket_timeout=5
        )

    def primary_now(self, n: int = 0) -> tuple[str, int]:
        host, port = self.sentinel(n).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return (str(host), int(port))

    def primary_port(self) -> int:
        return self.primary_now()[1]

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Every sentinel knows every replica and the two other sentinels."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError):
                states = [self.sentinel(n).execute_command("SENTINEL", "MASTER", SERVICE) for n in range(3)]
                if all(
                    _field(s, "num-slaves") >= self.count and _field(s, "num-other-sentinels") == 2
                    for s in states
                ):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("the sentinels did not settle")
            time.sleep(0.2)

    def failover(self) -> None:
        self.sentinel().execute_command("SENTINEL", "FAILOVER", SERVICE)

    def wait_primary(self, address: tuple[str, int] | None = None, timeout: float = 60.0) -> float:
        """Until every sentinel names `address` (any server but the first primary, when None)
        the primary and it answers ROLE master; returns how long that took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            with contextlib.suppress(redis.RedisError, TypeError, ValueError):
                named = {self.primary_now(n) for n in range(3)}
                if len(named) == 1:
                    (now,) = named
                    if (address is None and now != self.primary_address) or now == address:
                        role = redis.Redis(host=now[0], port=now[1], socket_timeout=2).execute_command("ROLE")
                        if role[0] in (b"master", "master"):
                            return time.monotonic() - started
            time.sleep(0.1)
        raise TimeoutError(f"{address or 'a replica'} did not become the primary")

    def direct(self) -> redis.Redis:
        """A plain client of the primary the sentinels name now (teardown reads)."""
        host, port = self.primary_now()
        if (host, port) == self.primary_address:
            host, port = self.primary.host, self.primary.port
        return redis.Redis(host=host, port=port, decode_responses=True)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for replica in self.replicas:
            replica.kill()


def _field(state: object, name: str) -> int:
    if isinstance(state, dict):
        return int(state.get(name, 0))
    items = list(state)  # type: ignore[call-overload]
    return int(dict(zip(items[::2], items[1::2], strict=True)).get(name, 0))
