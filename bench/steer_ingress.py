"""Steer ingress: steer POST throughput and latency against /readyz, /healthz, hello world, Redis.

    .venv/bin/python bench/steer_ingress.py [--runs 3] [--seconds 4] [--concurrency 16]

One command: starts its own redis-server (AOF on, as in production) and every server below,
then measures them all with the SAME load generator (bench/loadgen.py: asyncio raw-socket
keep-alive client, one process, `--concurrency` connections), round-robin, `--runs` times,
and prints the median requests/second of each, its ratio to the hello world and its p50/p99
latency at that maximum rate (closed loop). Then, for the headline targets, the same again
in an open loop at HALF each target's median maximum rate (`--rate-fraction`): requests due
at a fixed pace, latency counted from when each was due, so queueing shows.

Targets:
  steer      POST /api/v2/sessions/<id>/steer on `worktrain web` (granian 2 x 8), rotating
             over 64 fresh sessions per run (each accept RPUSHes to the session's pending list
             and XADDs its journal and event stream; no worker drains them, so a run adds
             ~20k small entries to Redis; fresh sessions keep every run alike)
  readyz     GET /readyz on the same server: one Redis PING, the floor of a Redis-backed route
  healthz    GET /healthz on the same server: no Redis, the floor of the server and Flask
  redis      the Redis ceiling for the same work: EVALSHA of accept.lua (what one steer runs),
             raw RESP over `--concurrency` connections from the same generator, no HTTP
  hello      Flask hello world under gunicorn gthread, 3 workers x 4 threads: the yardstick
  and the same steer route under other servers and shapes: granian 2 x 2, gunicorn gthread
  3 x 4 (`worktrain web --server gunicorn`), gunicorn sync and gevent (3 workers; gevent
  when installed), to pick the server by measurement.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from common import machine_line, percentile, tree_cpu_seconds  # noqa: E402
from loadgen import Tally, build_request, measure, resp_command  # noqa: E402

from daemon.bus.keys import Keys  # noqa: E402
from daemon.bus.scripts import script_source  # noqa: E402
from daemon.bus.session.registry import NewSession, SessionRegistry  # noqa: E402
from daemon.host.embedded_redis import RedisServer, free_port  # noqa: E402

BIN = Path(sys.executable).parent
SESSIONS_PER_RUN = 64


@dataclass
class Server:
    name: str
    argv: list[str]
    probe: str = "/healthz"
    needs: str | None = None  # a module that must be importable
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str], log_dir: Path) -> None:
        argv = [a.replace("{port}", str(self.port)) for a in self.argv]
        log = (log_dir / f"{self.name}.log").open("wb")
        self.process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.probe}", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready in {timeout}s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def servers() -> list[Server]:
    web = [str(BIN / "worktrain"), "web", "--port", "{port}"]
    gunicorn = [str(BIN / "python"), "-m", "gunicorn", "-b", "127.0.0.1:{port}", "-w", "3"]
    return [
        Server("web", web),  # `worktrain web` as shipped: granian, 2 workers x 8 threads
        Server(
            "hello-gthread",
            [
                str(BIN / "python"),
                "-m",
                "gunicorn",
                "-b",
                "127.0.0.1:{port}",
                "-w",
                "3",
                "-k",
                "gthread",
                "--threads",
                "4",
                "--chdir",
                "bench",
                "hello:app",
            ],
            probe="/",
        ),
        Server("web-granian-2x2", [*web, "--workers", "2", "--threads", "2"]),
        Server(
            "web-gunicorn-gthread-3x4", [*web, "--server", "gunicorn", "--workers", "3", "--threads", "4"]
        ),
        Server("web-gunicorn-sync-3", [*gunicorn, "-k", "sync", "bench.wsgi_app:app"]),
        Server(
            "web-gunicorn-gevent-3",
            [*gunicorn, "-k", "gevent", "--worker-connections", "64", "bench.wsgi_app:app"],
            needs="gevent",
        ),
    ]


def steer_requests(redis_url: str) -> list[bytes]:
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    registry = SessionRegistry(client, Keys("wt"))
    body = json.dumps({"text": "Focus on the failing test first; leave the refactor for later."}).encode()
    ids = [
        registry.create(NewSession(workflowId="bench", goal="bench", workspacePath="/tmp"))
        for _ in range(SESSIONS_PER_RUN)
    ]
    client.close()
    return [build_request("POST", f"/api/v2/sessions/{sid}/steer", body) for sid in ids]


def accept_commands(redis_url: str) -> list[bytes]:
    """EVALSHA of accept.lua with a steer's arguments, rotating over 64 fresh sessions."""
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys("wt")
    registry = SessionRegistry(client, keys)
    sha = client.script_load(script_source("accept"))
    text = "Focus on the failing test first; leave the refactor for later."
    commands = []
    for _ in range(SESSIONS_PER_RUN):
        sid = registry.create(NewSession(workflowId="bench", goal="bench", workspacePath="/tmp"))
        args = [text, "digest", "", "", "2026-01-01T00:00:00.000Z"]
        commands.append(resp_command("EVALSHA", sha, "8", *keys.session(sid).all(), *args))
    client.close()
    return commands


@dataclass
class Target:
    label: str
    port: int
    requests: Callable[[], list[bytes]]  # fresh per run (steers go to fresh sessions)
    roots: dict[str, list[int]]  # process trees whose CPU is charged to this target
    redis: bool = False
    paced: bool = False  # also measured in the open loop at a fraction of its maximum rate


@dataclass
class Results:
    rps: dict[str, list[float]] = field(default_factory=dict)
    cpu_us: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    p50: dict[str, list[float]] = field(default_factory=dict)
    p99: dict[str, list[float]] = field(default_factory=dict)


def targets(chosen: list[Server], redis_server: RedisServer, redis_pid: int) -> list[Target]:
    out = []
    url = redis_server.url
    for server in chosen:
        assert server.process is not None
        roots = {"server": [server.process.pid], "redis": [redis_pid]}
        if server.name == "hello-gthread":
            out.append(Target("hello", server.port, lambda: [build_request("GET", "/")], roots, paced=True))
            continue
        main = server.name == "web"
        out.append(
            Target(f"steer {server.name}", server.port, lambda: steer_requests(url), roots, paced=main)
        )
        if main:
            for route in ("readyz", "healthz"):
                request = build_request("GET", f"/{route}")
                out.append(Target(f"{route} web", server.port, lambda r=request: [r], roots, paced=True))
    if not chosen or any(s.name == "web" for s in chosen):
        redis_roots = {"server": [], "redis": [redis_pid]}
        out.append(
            Target(
                "redis EVALSHA accept",
                redis_server.port,
                lambda: accept_commands(url),
                redis_roots,
                True,
                True,
            )
        )
    return out


def measure_target(
    target: Target, args: argparse.Namespace, results: Results, rate: float | None = None
) -> None:
    cpu_at: dict[str, float] = {}

    def probe() -> float:
        for name, pids in target.roots.items():
            cpu_at[name] = tree_cpu_seconds(pids) - cpu_at.get(name, 0.0)
        cpu_at["loadgen"] = time.process_time() - cpu_at.get("loadgen", 0.0)  # this process only
        return 0.0

    label = target.label if rate is None else f"{target.label} @ {rate:.0f}/s"
    rps, _, tally = measure(
        "127.0.0.1", target.port, target.requests(), args.concurrency, args.warmup, args.seconds, probe,
        rate=rate, redis=target.redis,
    )  # fmt: skip
    for name, seconds in cpu_at.items():
        results.cpu_us.setdefault((label, name), []).append(seconds / max(tally.ok, 1) * 1e6)
    warn(label, tally)
    results.rps.setdefault(label, []).append(rps)
    results.p50.setdefault(label, []).append(percentile(tally.latencies, 50) * 1000)
    results.p99.setdefault(label, []).append(percentile(tally.latencies, 99) * 1000)
    print(f"  {label:<32} {rps:8.0f} req/s  p50 {results.p50[label][-1]:6.2f} ms  "
          f"p99 {results.p99[label][-1]:6.2f} ms", file=sys.stderr)  # fmt: skip


def warn(label: str, tally: Tally) -> None:
    bad = {s: n for s, n in tally.statuses.items() if not 200 <= s < 300}
    if bad or tally.errors:
        print(f"  warning: {label}: non-2xx {bad}, connect errors {tally.errors}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rate-fraction", type=float, default=0.5, help="open loop at this x the max rate")
    parser.add_argument("--only", nargs="*", help="server names to run (default: all installed)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-"))
    redis_server = RedisServer(tmp / "redis")
    redis_server.start()
    assert redis_server.process is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKTRAIN_")}
    env.update(REDIS_URL=redis_server.url, WORKTRAIN_DATA_DIR=str(tmp / "data"), PYTHONPATH=str(ROOT))
    # No worker drains the sessions: without this the pending cap (100 a session) would turn
    # nearly every steer into a 429, and the run would measure refusals, not acceptance.
    env.update(WORKTRAIN_MAX_PENDING_STEERS=str(10**9))
    chosen = [s for s in servers() if not args.only or s.name in args.only]
    skipped = [s.name for s in chosen if s.needs and importlib.util.find_spec(s.needs) is None]
    chosen = [s for s in chosen if s.name not in skipped]
    results = Results()
    try:
        for server in chosen:
            server.start(env, tmp)
        for server in chosen:
            server.wait()
        plan = targets(chosen, redis_server, redis_server.process.pid)
        for _ in range(args.runs):
            for target in plan:
                measure_target(target, args, results)
        for _ in range(args.runs):
            for target in [t for t in plan if t.paced]:
                rate = statistics.median(results.rps[target.label]) * args.rate_fraction
                measure_target(target, args, results, rate)
    finally:
        for server in chosen:
            server.stop()
        redis_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(results, args, skipped, time.monotonic() - started)


def report(results: Results, args: argparse.Namespace, skipped: list[str], took: float) -> None:
    hello = statistics.median(results.rps["hello"]) if "hello" in results.rps else None
    print(
        f"\n{machine_line()}\n{args.runs} runs x {args.seconds:g}s, {args.concurrency} connections; "
        f"open loop at {args.rate_fraction:g}x each target's median maximum rate"
    )
    print(
        "\n| target | median req/s | min | max | / hello | p50 ms | p99 ms "
        "| server CPU µs/req | redis CPU µs/req | loadgen CPU µs/req |"
        "\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for label, values in results.rps.items():
        ratio = f"{statistics.median(values) / hello:.2f}" if hello and "@" not in label else "-"
        cpu = [
            statistics.median(results.cpu_us.get((label, name), [0.0]))
            for name in ("server", "redis", "loadgen")
        ]
        print(
            f"| {label} | {statistics.median(values):.0f} | {min(values):.0f} | {max(values):.0f} | {ratio} "
            f"| {statistics.median(results.p50[label]):.2f} | {statistics.median(results.p99[label]):.2f} "
            f"| {cpu[0]:.0f} | {cpu[1]:.0f} | {cpu[2]:.0f} |"
        )
    if skipped:
        print(f"\nskipped (not installed): {', '.join(skipped)}")
    print("\ntargets: steer >= 0.8x hello (stretch 1.0); steer p99 <= 10 ms at half the maximum rate")
    print(f"\ntook {took:.0f}s")


if __name__ == "__main__":
    main()
