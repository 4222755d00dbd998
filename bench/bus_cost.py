"""Bus cost: Redis round trips per bus operation, and bus accepts/s against raw RPUSH/s.

    .venv/bin/python bench/bus_cost.py [--seconds 2] [--runs 5]

One command: starts its own redis-server (AOF everysec, as in production) and calls the bus
directly (daemon.bus.session.steerbus), no HTTP.

1. Round trips, counted on the client (tests/roundtrips.py: one `send_packed_command` is
   one trip) after a warm-up call (the first EVALSHA of a script may load it): accept, turn
   end with nothing pending and with k pending, heartbeat, and the other worker calls.
   Targets: accept 1, turn end 1 (any k), heartbeat 1.
2. Throughput on ONE connection, sequential calls, `--runs` interleaved rounds of
   `--seconds` each: `SteerBus.accept` (one EVALSHA of accept.lua: HGET, HINCRBY, RPUSH,
   two XADDs) against a raw `RPUSH` of the same JSON, and `PING`. Target: accepts/s >= 0.5x
   RPUSH/s. Redis's own microseconds per call (INFO commandstats) show what is the script
   and what is the client.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine_line, median, new_bench_session, table

sys.path.insert(0, str(ROOT))
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.host.embedded_redis import RedisServer
from daemon.schema.records import PendingSteer
from tests.roundtrips import RoundTrips, counting_client

TEXT = "Focus on the failing test first; leave the refactor for later."


def count(action: Callable[[], object]) -> int:
    with RoundTrips() as trips:
        action()
    return trips.count


def running_channel(bus: SteerBus, client: redis.Redis) -> SessionChannel:
    channel = bus.channel(new_bench_session(client), "bench-worker", 30)
    channel.claim()
    channel.start_turn()
    return channel


def round_trips(url: str) -> list[list[object]]:
    client = counting_client(url)
    bus = SteerBus(client, Keys("wt"))
    warm = running_channel(bus, client)  # every script loaded once, outside the counts
    bus.accept(warm.session_id, TEXT)
    warm.turn_ended()
    warm.checkpoint(0, ["{}"], [1], 2)
    warm.heartbeat()
    warm.start_turn()
    rows: list[list[object]] = []
    sid = new_bench_session(client)
    rows.append(["accept (SteerBus.accept)", count(lambda: bus.accept(sid, TEXT)), 1])
    channel = running_channel(bus, client)
    rows.append(["turn end, nothing pending (turn_ended)", count(channel.turn_ended), 1])
    for k in (1, 10, 100):
        channel.start_turn()
        for _ in range(k):
            bus.accept(channel.session_id, TEXT)
        taken: list[PendingSteer] = []
        trips = count(lambda taken=taken: taken.extend(channel.turn_ended()))
        rows.append([f"turn end, {k} pending (drains {len(taken)})", trips, 1])
        channel.checkpoint(0, ["{}"], [steer.offset for steer in taken], 2)  # retire them
    rows.append(["heartbeat", count(channel.heartbeat), 1])
    rows.append(["turn start (turn_started)", count(channel.start_turn), "-"])
    rows.append(["checkpoint, 1 message", count(lambda: channel.checkpoint(0, ["{}"], [], 2)), "-"])
    client.close()
    return rows


def rate(action: Callable[[], object], seconds: float) -> float:
    done, deadline = 0, time.perf_counter() + seconds
    started = time.perf_counter()
    while True:
        for _ in range(50):
            action()
        done += 50
        if time.perf_counter() >= deadline:
            return done / (time.perf_counter() - started)


def commandstats(client: redis.Redis) -> dict[str, float]:
    stats = client.info("commandstats")
    return {name: float(value["usec_per_call"]) for name, value in stats.items() if isinstance(value, dict)}


def throughput(url: str, seconds: float, runs: int) -> tuple[list[list[object]], dict[str, float]]:
    # One connection: a pool of size one, every call sequential on it.
    pool = redis.BlockingConnectionPool.from_url(url, decode_responses=True, max_connections=1)
    client = redis.Redis(connection_pool=pool)
    bus = SteerBus(client, Keys("wt"))
    sessions = [new_bench_session(client) for _ in range(64)]
    payload = '{"offset": 1, "text": "' + TEXT + '", "turnId": 0, "clientMsgId": null, "acceptedAt": "x"}'
    turn = iter(range(10**12))
    actions: dict[str, Callable[[], object]] = {
        "accept (EVALSHA accept.lua)": lambda: bus.accept(sessions[next(turn) % 64], TEXT),
        "RPUSH (raw, same JSON)": lambda: client.rpush("bench:rpush", payload),
        "PING": client.ping,
    }
    bus.accept(sessions[0], TEXT)
    client.config_resetstat()
    results: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(runs):
        for name, action in actions.items():
            results[name].append(rate(action, seconds))
            if name.startswith("RPUSH"):
                client.delete("bench:rpush")
    server_us = commandstats(client)
    rpush = median(results["RPUSH (raw, same JSON)"])
    rows: list[list[object]] = [
        [
            name,
            f"{median(values):.0f}",
            f"{min(values):.0f}",
            f"{max(values):.0f}",
            f"{median(values) / rpush:.2f}",
        ]
        for name, values in results.items()
    ]
    client.close()
    return rows, server_us


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wt-bus-"))
    server = RedisServer(tmp / "redis")
    server.start()
    try:
        trips = round_trips(server.url)
        rows, server_us = throughput(server.url, args.seconds, args.runs)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{machine_line()}\n")
    print(table(["operation", "round trips", "target"], trips))
    print(f"\nOne connection, sequential calls, {args.runs} runs x {args.seconds:g} s (median, min, max):\n")
    print(table(["call", "calls/s", "min", "max", "/ RPUSH"], rows))
    wanted = {k: v for k, v in server_us.items() if k.split("_")[-1] in ("evalsha", "rpush", "ping")}
    own = ", ".join(f"{k.removeprefix('cmdstat_')} {v:.1f} µs" for k, v in sorted(wanted.items()))
    print(f"\nRedis's own time per call (INFO commandstats): {own}")
    print("\ntargets: round trips 1, 1, 1, 1; accepts/s >= 0.5x RPUSH/s")
    print(f"took {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
