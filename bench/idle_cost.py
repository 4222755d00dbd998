"""Idle cost: Redis round trips and commands per idle session per second, per-session loops
against the shared loops of one worker process (issue 12).

    .venv/bin/python bench/idle_cost.py [--sessions 200] [--seconds 20] [--lease 30]

One command, its own redis-server. N sessions are claimed and wait idle for a steer (the
agent's real `idle_wait`, daemon/agent/loop.py) for `--seconds`, first as a work horse ran
them before issue 12 (each session: its own heartbeat thread on its own connection,
bench/perlease.py, and its own blocking XREAD per 1 s slice plus a heartbeat between
slices), then through one `SessionHub` as a worker process with `--concurrency N` runs them
(daemon/session/sessionhub.py: one pipelined heartbeat per tick for every session, one XREAD for
every journal). Round trips are counted on the client (tests/roundtrips.py: one
`send_packed_command` is one trip; a pipeline is one), commands on the server (INFO
commandstats: Lua's own calls included), the client's CPU (this process), connections as
Redis lists them (CLIENT LIST; the shared run's sessions use the worker's bounded pool,
worker/shared.py `pool_size`). At the end one steer to
each session checks that every wait still wakes and takes it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine_line, new_bench_session, table

sys.path.insert(0, str(ROOT))
import redis
from perlease import heartbeat_for

from daemon.agent.loop import idle_wait
from daemon.bus.keys import Keys
from daemon.bus.session.journalwaiter import JournalWaiter
from daemon.bus.session.leasebeats import LeaseBeats
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.host.embedded_redis import RedisServer
from daemon.session.sessionhub import SessionHub
from tests.roundtrips import CountingConnection, counting_client
from worker.shared import pool_size

Attend = Callable[[SessionChannel], AbstractContextManager[SessionChannel]]
COUNTED: dict[str, Any] = {
    "decode_responses": True,
    "socket_timeout": 10,
    "connection_class": CountingConnection,
}


def commands(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if not k.endswith("_info"))


def per_session_loops(url: str, lease: float) -> tuple[Attend, Callable[[], None]]:
    """As a work horse runs one session: a heartbeat thread on a connection of its own."""

    @contextmanager
    def attend(channel: SessionChannel) -> Iterator[SessionChannel]:
        own = counting_client(url)
        try:
            with heartbeat_for(channel.using(own), lease):
                yield channel
        finally:
            own.connection_pool.disconnect()

    return attend, lambda: None


def shared_loops(url: str, bus: SteerBus, lease: float) -> tuple[Attend, Callable[[], None]]:
    """As one worker process runs them all (worker/shared.py)."""
    beats = LeaseBeats(bus, counting_client(url), lease)
    own = redis.Redis(connection_pool=redis.ConnectionPool.from_url(url, **COUNTED)).client()
    hub = SessionHub(beats, JournalWaiter(own, bus.client))
    return hub.attend, hub.close


def run_mode(name: str, url: str, n: int, seconds: float, lease: float, settle: float = 3.0) -> list[object]:
    control = redis.Redis.from_url(url, decode_responses=True)
    # the sessions' own calls (take, XREAD, heartbeat): a pool that grows with them (a
    # blocking XREAD per session needs a connection each), or the worker's bounded one
    pool = (
        redis.ConnectionPool.from_url(url, max_connections=n + 10, **COUNTED)
        if name == "per session"
        else redis.BlockingConnectionPool.from_url(url, max_connections=pool_size(n), **COUNTED)
    )
    client = redis.Redis(connection_pool=pool)
    bus = SteerBus(client, Keys("wt"))
    attend, close = per_session_loops(url, lease) if name == "per session" else shared_loops(url, bus, lease)
    channels = []
    for _ in range(n):
        channel = bus.channel(new_bench_session(control), "bench", lease)
        channel.claim()
        channels.append(channel)
    got: dict[str, object] = {}

    def session(channel: SessionChannel) -> None:
        with attend(channel) as looped:
            got[channel.session_id] = idle_wait(looped, seconds + 30, lambda: False)

    threads = [threading.Thread(target=session, args=(ch,), daemon=True) for ch in channels]
    for thread in threads:
        thread.start()
    time.sleep(settle)  # every session is in its wait
    trips0, commands0 = CountingConnection.sent, commands(control)
    started, cpu0 = time.monotonic(), time.process_time()
    time.sleep(seconds)
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu0
    trips, cmds = CountingConnection.sent - trips0, commands(control) - commands0 - 1
    connected = len(control.client_list()) - 1  # without this one
    for channel in channels:
        bus.accept(channel.session_id, "wake up")
    for thread in threads:
        thread.join(30)
    close()
    woken = sum(1 for v in got.values() if isinstance(v, list) and len(v) == 1)
    pool.disconnect()  # (a pool passed in is not closed with its client)
    control.close()
    per = n * elapsed
    cpu_ms = cpu / per * 1000  # this process: the sessions' threads and the shared loops
    return [name, n, f"{trips / per:.3f}", f"{cmds / per:.3f}", f"{cpu_ms:.3f}", connected, f"{woken}/{n}"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before counting")
    args = parser.parse_args(argv)
    print(f"\n{machine_line()}", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="wt-idle-"))
    server = RedisServer(tmp / "redis")
    server.start()
    try:
        rows = [
            run_mode(mode, server.url, args.sessions, args.seconds, args.lease, args.settle)
            for mode in ("per session", "shared")
        ]
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    header = ["loops", "idle sessions", "round trips / session / s", "commands / session / s"]
    more = ["client CPU ms / session / s", "connections open", "woken by a steer"]
    print(table([*header, *more], rows))


if __name__ == "__main__":
    main()
