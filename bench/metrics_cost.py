"""What the fleet metrics cost a steer (issue 25): the web app called in-process, one app with
the Redis-backed metrics recorder and one without (`NULL_RECORDER`), alternated on one Redis.

    .venv/bin/python bench/metrics_cost.py [--rounds 8] [--steers 1000]

Starts its own redis-server. The two alternate in ABBA order (a steer's cost drifts with
what Redis holds and the machine's load). Prints the CPU time per steer of each (medians over rounds) and
the cost of the recording calls alone (count + observe + an idle tracing span), per steer.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import timeit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine_line, median, table

sys.path.insert(0, str(ROOT))

import redis

from daemon.bus.fleet.metrics import NULL_RECORDER, STEER_ACCEPT, STEERS, MetricsRecorder
from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.mirror import EventMirror
from daemon.host import tracing
from daemon.host.config import Settings
from daemon.host.embedded_redis import RedisServer
from daemon.workflows import load_catalog
from web.app import create_app
from web.jobs import RqJobQueue
from web.readers import RedisReader

BODY = json.dumps({"text": "steer text for the benchmark"}).encode()


def client_for(url: str, data_dir: Path, metrics: MetricsRecorder) -> Any:
    client = redis.Redis.from_url(url, decode_responses=True)
    keys = Keys("wt")
    settings = Settings(data_dir=data_dir, max_pending_steers=10_000_000)
    app = create_app(
        bus=SteerBus(client, keys),
        registry=SessionRegistry(client, keys),
        enqueue=RqJobQueue(redis.Redis.from_url(url)),
        catalog=load_catalog(None),
        settings=settings,
        event_reader=RedisReader(client, keys),
        mirror=EventMirror(client, keys, None),
        metrics=metrics,
    )
    return app.test_client()


def cpu_per_steer(client: Any, session_id: str, steers: int) -> float:
    started = time.process_time()
    for _ in range(steers):
        answer = client.post(
            f"/api/v2/sessions/{session_id}/steer", data=BODY, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 200, answer.data
    return (time.process_time() - started) / steers * 1e6


def recording_calls(recorder: MetricsRecorder, number: int = 100_000) -> float:
    def one() -> None:
        with tracing.span("POST", {"worktrain.session_id": "x"}, server=True):
            tracing.traceparent()
        recorder.count(STEERS, outcome="accepted")
        recorder.observe(STEER_ACCEPT, 0.0003)

    return min(timeit.repeat(one, number=number, repeat=3)) / number * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steers", type=int, default=1000)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-metrics-"))
    server = RedisServer(tmp / "redis")
    server.start()
    try:
        bus_client = redis.Redis.from_url(server.url, decode_responses=True)
        recorder = MetricsRecorder(bus_client, Keys("wt"))
        clients = {
            "without metrics": client_for(server.url, tmp, NULL_RECORDER),
            "with metrics": client_for(server.url, tmp, recorder),
        }
        registry = SessionRegistry(bus_client, Keys("wt"))
        session_id = registry.create(NewSession(workflowId="x", goal="g", workspacePath="/tmp", stepCount=1))
        for client in clients.values():
            cpu_per_steer(client, session_id, max(10, args.steers // 5))  # warm up
        runs: dict[str, list[float]] = {name: [] for name in clients}
        order = list(clients)
        for _ in range(args.rounds):
            for name in order:  # ABBA: neither always goes first
                runs[name].append(cpu_per_steer(clients[name], session_id, args.steers))
            order.reverse()
        calls = recording_calls(MetricsRecorder(bus_client, Keys("wt"), background=False), 10_000)
        recorder.close()
    finally:
        server.stop()
    print(machine_line())
    rows = [(name, f"{median(v):.0f}", f"{min(v):.0f}-{max(v):.0f}") for name, v in runs.items()]
    print(table(("app", "CPU µs per steer (median)", "range"), rows))
    print(f"\nthe recording calls alone (count + observe + an idle span): {calls:.1f} µs per steer")


if __name__ == "__main__":
    main()
