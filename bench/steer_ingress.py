"""Steer ingress benchmark: steer POST throughput against /readyz and a Flask hello world.

    .venv/bin/python bench/steer_ingress.py [--runs 3] [--seconds 4] [--concurrency 16]

One command: starts its own redis-server (AOF on, as in production) and every server below,
then measures them all with the SAME load generator (bench/loadgen.py: asyncio raw-socket
keep-alive client, one process, `--concurrency` connections), round-robin, `--runs` times,
and prints the median requests/second of each and its ratio to the hello world.

Targets:
  steer      POST /api/v2/sessions/<id>/steer on `worktrain web` (granian 2 x 8), rotating
             over 64 fresh sessions per run (each accept RPUSHes to the session's pending list
             and XADDs its journal and event stream; no worker drains them, so a run adds
             ~20k small entries to Redis; fresh sessions keep every run alike)
  readyz     GET /readyz on the same server: one Redis PING, the floor of a Redis-backed route
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
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from loadgen import build_request, measure  # noqa: E402

from daemon.embedded_redis import RedisServer, free_port  # noqa: E402
from daemon.keys import Keys  # noqa: E402
from daemon.registry import NewSession, SessionRegistry  # noqa: E402

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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(roots: list[int]) -> float:
    """CPU seconds (user + system) used so far by the processes `roots` and all their descendants.

    Unlike throughput, this barely moves when something else loads the machine, so it is
    the steadier figure of the two on a shared 2-core box.
    """
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    total, wanted = 0, set(roots)
    for pid in ticks:
        ancestor = pid
        while ancestor > 1 and ancestor not in wanted:
            ancestor = parent.get(ancestor, 0)
        if ancestor in wanted:
            total += ticks[pid]
    return total / CLOCK_TICKS


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only", nargs="*", help="server names to run (default: all installed)")
    args = parser.parse_args()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-"))
    redis_server = RedisServer(tmp / "redis")
    redis_server.start()
    assert redis_server.process is not None
    redis_pid = redis_server.process.pid
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKTRAIN_")}
    env.update(REDIS_URL=redis_server.url, WORKTRAIN_DATA_DIR=str(tmp / "data"), PYTHONPATH=str(ROOT))
    chosen = [s for s in servers() if not args.only or s.name in args.only]
    skipped = [s.name for s in chosen if s.needs and importlib.util.find_spec(s.needs) is None]
    chosen = [s for s in chosen if s.name not in skipped]
    results: dict[str, list[float]] = {}
    cpu_us: dict[tuple[str, str], list[float]] = {}
    try:
        for server in chosen:
            server.start(env, tmp)
        for server in chosen:
            server.wait()
        for _ in range(args.runs):
            for server in chosen:
                targets = {"hello-gthread": [("hello", [build_request("GET", "/")])]}.get(server.name)
                if targets is None:
                    targets = [(f"steer {server.name}", steer_requests(redis_server.url))]
                    if server.name == "web":
                        targets.append(("readyz web", [build_request("GET", "/readyz")]))
                assert server.process is not None
                roots = {"web": [server.process.pid], "redis": [redis_pid]}
                for label, requests in targets:
                    cpu_at: dict[str, float] = {}

                    def probe(
                        roots: dict[str, list[int]] = roots, cpu_at: dict[str, float] = cpu_at
                    ) -> float:
                        for name, pids in roots.items():
                            cpu_at[name] = tree_cpu_seconds(pids) - cpu_at.get(name, 0.0)
                        return 0.0

                    rps, _, tally = measure(
                        "127.0.0.1", server.port, requests, args.concurrency, args.warmup, args.seconds, probe
                    )
                    for name, seconds in cpu_at.items():
                        cpu_us.setdefault((label, name), []).append(seconds / max(tally.ok, 1) * 1e6)
                    bad = {s: n for s, n in tally.statuses.items() if not 200 <= s < 300}
                    if bad or tally.errors:
                        print(
                            f"  warning: {label}: non-2xx {bad}, connect errors {tally.errors}",
                            file=sys.stderr,
                        )
                    results.setdefault(label, []).append(rps)
                    print(f"  {label:<22} {rps:8.0f} req/s", file=sys.stderr)
    finally:
        for server in chosen:
            server.stop()
        redis_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(results, cpu_us, args, skipped, time.monotonic() - started)


def report(
    results: dict[str, list[float]],
    cpu_us: dict[tuple[str, str], list[float]],
    args: argparse.Namespace,
    skipped: list[str],
    took: float,
) -> None:
    hello = statistics.median(results["hello"]) if "hello" in results else None
    print(
        f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {args.runs} runs x {args.seconds:g}s, "
        f"{args.concurrency} connections"
    )
    print(
        "\n| target | median req/s | min | max | / hello | server CPU µs/req | redis CPU µs/req |"
        "\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for label, values in results.items():
        ratio = f"{statistics.median(values) / hello:.2f}" if hello else "-"
        web_cpu = statistics.median(cpu_us.get((label, "web"), [0.0]))
        redis_cpu = statistics.median(cpu_us.get((label, "redis"), [0.0]))
        print(
            f"| {label} | {statistics.median(values):.0f} | {min(values):.0f} | {max(values):.0f} | {ratio} "
            f"| {web_cpu:.0f} | {redis_cpu:.0f} |"
        )
    if skipped:
        print(f"\nskipped (not installed): {', '.join(skipped)}")
    print(f"\ntook {took:.0f}s")


if __name__ == "__main__":
    main()
