"""A Redis primary, a replica and three sentinels on loopback, for the failover tests.

Real redis-server processes (the one WORKTRAIN_REDIS_SERVER / PATH picks); the sentinels are
`redis-server <conf> --sentinel` (the bundled 6.2 and Debian's 7.x both have the mode).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from daemon.host.embedded_redis import RedisServer, find_binary, free_port

SERVICE = "wt"
DOWN_AFTER_MS = 1000


@dataclass
class Sentinels:
    tmp: Path
    primary: RedisServer
    replica: RedisServer | None = None
    ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self) -> Sentinels:
        self.replica = RedisServer(
            self.tmp / "replica", extra_args=("--replicaof", "127.0.0.1", str(self.primary.port))
        )
        self.replica.start()
        for n in range(3):
            port = free_port()
            conf = self.tmp / f"sentinel{n}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.tmp}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            log = open(self.tmp / f"sentinel{n}.log", "ab")  # noqa: SIM115  # the child holds it
            self.processes.append(
                subprocess.Popen(
                    [str(find_binary("redis-server")), str(conf), "--sentinel"], stdout=log, stderr=log
                )
            )
            self.ports.append(port)
        self.wait_settled()
        return self

    def sentinel(self, n: int = 0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.ports[n], decode_responses=True, socket_timeout=5)

    def primary_port(self) -> int:
        _host, port = self.sentinel().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Every sentinel knows the replica and the two other sentinels."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError):
                states = [self.sentinel(n).execute_command("SENTINEL", "MASTER", SERVICE) for n in range(3)]
                if all(
                    _field(s, "num-slaves") >= 1 and _field(s, "num-other-sentinels") == 2 for s in states
                ):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("the sentinels did not settle")
            time.sleep(0.2)

    def failover(self) -> None:
        self.sentinel().execute_command("SENTINEL", "FAILOVER", SERVICE)

    def wait_primary(self, port: int, timeout: float = 60.0) -> float:
        """Until the sentinels name `port` as the primary and it answers ROLE master."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            with contextlib.suppress(redis.RedisError, TypeError, ValueError):
                if self.primary_port() == port:
                    role = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2).execute_command("ROLE")
                    if role[0] in (b"master", "master"):
                        return time.monotonic() - started
            time.sleep(0.1)
        raise TimeoutError(f"{port} did not become the primary")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        if self.replica is not None:
            self.replica.kill()


def _field(state: object, name: str) -> int:
    if isinstance(state, dict):
        return int(state.get(name, 0))
    items = list(state)  # type: ignore[call-overload]
    return int(dict(zip(items[::2], items[1::2], strict=True)).get(name, 0))
