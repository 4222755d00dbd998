"""Interrupt latency: from an interrupt steer's accept to the worker's next model request.

    .venv/bin/python bench/interrupt_latency.py [--sessions 30] [--lease 3]

One command: starts its own redis-server and the fake Messages API (in this process), then
runs `--sessions` sessions one after another through the real runner and SDK, each with the
process's interrupt listener (daemon/bus/session/interruptlistener.py) and a lease heartbeat thread. In
each, turn 1's model call is held by the fake (before its headers, or mid-stream once the
reply has begun, alternately) — or turn 1 runs a `sleep 30` Bash command — and an interrupt
steer is accepted; measured is the time until the fake receives the next request (which
must carry the steer), and for Bash until the command's process is gone. A last series runs
without the listener: the heartbeat (every lease/3) is then what notices.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine_line, median, percentile, table

sys.path.insert(0, str(ROOT))
os.environ["WORKTRAIN_FORBID_REAL_API"] = "1"

import redis

from daemon.agent.model import AnthropicModel, ModelRequest
from daemon.bus.keys import Keys
from daemon.bus.session.interruptlistener import InterruptListener
from daemon.bus.session.journalwaiter import JournalWaiter
from daemon.bus.session.leasebeats import LeaseBeats
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.bus.streams.issues import IssueSink
from daemon.fakemodel import FakeModelServer, reply, tool
from daemon.host.embedded_redis import RedisServer
from daemon.session.runner import WorkerServices, run_session
from daemon.session.sessionhub import SessionHub
from daemon.workflows import load_catalog
from tests.crash.harness import running

STEER = "STOP: take the other approach."
NOTES = "The coordinator interrupted; switching approach as asked, with notes long enough."


def carries_steer(body: dict[str, Any]) -> bool:
    return STEER in json.dumps(body.get("messages", []))


def rule_for(abandoned: list[Any]) -> Callable[[ModelRequest], Any]:
    def rule(request: ModelRequest) -> Any:
        if STEER in json.dumps([m.wire() for m in request.messages]):
            return reply(tool("continue_workflow", notes=NOTES))
        return reply(*abandoned)

    return rule


class Bench:
    def __init__(self, client: redis.Redis, tmp: Path, lease: float) -> None:
        self.client = client
        self.keys = Keys("wt")
        self.bus = SteerBus(client, self.keys)
        self.registry = SessionRegistry(client, self.keys)
        self.tmp = tmp
        self.lease = lease
        self.catalog = load_catalog(ROOT / "tests" / "fixtures" / "workflows")
        # the worker's lease loop and idle waiter, one for the bench's sessions as for a process's
        self.hub = SessionHub(LeaseBeats(self.bus, client, lease), JournalWaiter(client, client))

    def services(self, fake: FakeModelServer, listener: InterruptListener | None) -> WorkerServices:
        model = AnthropicModel("claude-bench", api_key="bench-key", base_url=fake.url)
        return WorkerServices(
            bus=self.bus,
            registry=self.registry,
            events=EventSink(self.client, self.keys, None),
            issues=IssueSink(self.client, self.keys, self.tmp),
            catalog=self.catalog,
            make_model=lambda _limits: model,
            worker_id=f"bench:{os.getpid()}:{time.monotonic_ns()}",
            lease_seconds=self.lease,
            idle_wait_seconds=0,
            keep_lease=self.hub.attend,
            interrupts=listener,
        )

    def one(
        self, fake: FakeModelServer, listener: InterruptListener | None, kind: str
    ) -> tuple[float, float]:
        """(ms to the next request, ms until the Bash command was gone or 0)."""
        workspace = self.tmp / f"ws-{time.monotonic_ns()}"
        workspace.mkdir()
        seconds = f"30.{time.monotonic_ns() % 10**9:09d}"  # a command line nothing else has
        sid = self.registry.create(
            NewSession(workflowId="two-step", goal="bench", workspacePath=str(workspace), stepCount=2)
        )
        before = len(fake.requests)
        if kind == "bash":
            fake.script.rule = rule_for([tool("Bash", command=f"sleep {seconds}")])
        else:
            fake.script.rule = rule_for([tool("Bash", command="true")])
            fake.hold(when=lambda body: not carries_steer(body), after_start=kind == "mid-stream")
        worker = threading.Thread(target=run_session, args=(sid, self.services(fake, listener)))
        worker.start()
        fake.wait_for_requests(before + 1, timeout=30)
        if kind == "bash":  # in its own PID namespace: found from outside by its command line
            while not running("sleep", seconds):
                time.sleep(0.001)
        sent = time.perf_counter()
        self.bus.accept(sid, STEER, mode="interrupt")
        gone = 0.0
        if kind == "bash":
            while running("sleep", seconds):  # a scan of /proc: a few ms of resolution
                time.sleep(0.0005)
            gone = (time.perf_counter() - sent) * 1000
        requests = fake.wait_for_requests(before + 2, timeout=30)
        latency = (time.perf_counter() - sent) * 1000
        assert carries_steer(requests[before + 1]), "the next request did not carry the steer"
        worker.join(timeout=30)
        fake.release()
        return latency, gone


def series(
    bench: Bench, fake: FakeModelServer, listener: InterruptListener | None, kind: str, n: int
) -> list[Any]:
    latencies, gone = [], []
    for _ in range(n):
        latency, killed = bench.one(fake, listener, kind)
        latencies.append(latency)
        if killed:
            gone.append(killed)
    row = [
        f"{kind}{'' if listener else ', heartbeat only'}",
        n,
        f"{median(latencies):.1f}",
        f"{percentile(latencies, 90):.1f}",
        f"{max(latencies):.1f}",
        f"{median(gone):.1f}" if gone else "-",
    ]
    return row


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=30, help="sessions per series")
    parser.add_argument("--lease", type=float, default=3.0, help="lease seconds (heartbeat every third)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wt-interrupt-") as raw:
        tmp = Path(raw)
        server = RedisServer(tmp / "redis")
        server.start()
        client = redis.Redis.from_url(server.url, decode_responses=True)
        listener = InterruptListener(
            lambda: redis.Redis.from_url(server.url, decode_responses=True), Keys("wt")
        )
        listener.start()
        listener.subscribed.wait(10)
        try:
            with FakeModelServer() as fake:
                bench = Bench(client, tmp, args.lease)
                rows = [
                    series(bench, fake, listener, kind, args.sessions)
                    for kind in ("before headers", "mid-stream", "bash")
                ]
                rows.append(series(bench, fake, None, "before headers", max(args.sessions // 5, 1)))
        finally:
            listener.stop()
            client.close()
            server.stop()
    header = ["held call", "sessions", "next request p50 ms", "p90 ms", "max ms", "Bash gone p50 ms"]
    out = f"{machine_line()}\nlease {args.lease:g} s (heartbeat every {args.lease / 3:g} s)\n\n" + table(
        header, rows
    )
    print(out)
    return out


if __name__ == "__main__":
    main()
