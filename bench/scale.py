"""Scale: N concurrent sessions on this machine, each steered every 2 s, checked exactly-once.

    .venv/bin/python bench/scale.py --sessions 100 [--seconds 120] [--interval 2] [--latency 1]
        [--processes P --concurrency C] [--target-ms 50]

`--concurrency 1` (the default here) runs one worker process per session, each forking a
work horse per job (`--processes` is then the number of sessions); `--concurrency C > 1`
runs `worktrain worker --processes P --concurrency C`, each process running up to C
sessions in threads (worker/threaded.py).

One command, one scale point (run it for 25, 50 and 100 sessions; each run stays under 5
minutes). It starts a real stack of its own: redis-server (AOF everysec), the fake Messages
API (bench/fakeloop.py: `--latency` seconds per call, one `Read` per turn, never finishing),
`worktrain web` (granian, as shipped) and `worktrain worker --processes N` (RQ: one worker
process per concurrent session, each forking a work horse per job), dispatches N sessions
through the API, and once every session runs, a coordinator (this process, 4 threads over
keep-alive connections) steers each session every `--interval` s for `--seconds` s, each
steer a unique text. Then it waits for the last steers to be delivered, measures memory,
cancels every session, and checks:

- exactly once: every accepted steer's text is in exactly one model request's new user
  message (from the fake model's record), in offset order, and the journal has exactly one
  `delivered` entry for every accepted offset (no undelivered, no duplicate);
- steer-to-model latency: from the `turn_ended` event of the turn end that drained the steer
  (its `ts`) to the arrival, at the fake model, of the request that carries it;
- RSS and PSS of every worker process and work horse (/proc/<pid>/smaps_rollup);
- Redis memory: INFO used_memory per session, MEMORY USAGE of each session's keys, and of the
  steer journal per 1,000 entries.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BIN,
    LOOP_WORKFLOW_ID,
    ROOT,
    Child,
    bench_env,
    descendants,
    machine_line,
    memory_kib,
    start_fake_model,
    tree_cpu_seconds,
    write_loop_fixtures,
)
from scale_report import Report, Steer, redis_used_memory

sys.path.insert(0, str(ROOT))
from daemon.host.embedded_redis import RedisServer, free_port

MAX_PROCESSES = 64  # the limit of `worktrain worker --processes`


@dataclass
class Stack:
    tmp: Path
    redis: RedisServer
    children: dict[str, Child] = field(default_factory=dict)
    web_port: int = 0
    model_url: str = ""

    def stop(self) -> None:
        for child in reversed(list(self.children.values())):
            child.stop()
        self.redis.stop()


def renice(pid: int, nice: int) -> None:
    """Every thread of `pid` (threads it starts later inherit it from their creator)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(task), nice)


def worker_commands(sessions: int, processes: int, concurrency: int) -> list[list[str]]:
    """`worktrain worker` command lines: one process per session at concurrency 1 (at most 64
    per command), else P processes of C sessions each."""
    if concurrency > 1:
        return [[str(BIN / "worktrain"), "worker", "-n", str(processes), "-c", str(concurrency)]]
    commands = -(-sessions // MAX_PROCESSES)
    counts = [sessions // commands + (1 if i < sessions % commands else 0) for i in range(commands)]
    return [[str(BIN / "worktrain"), "worker", "-n", str(count), "-c", "1"] for count in counts]


def start_stack(
    sessions: int, latency: float, model_nice: int = 0, processes: int = 0, concurrency: int = 1
) -> tuple[Stack, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="wt-scale-"))
    stack = Stack(tmp, RedisServer(tmp / "redis"))
    stack.redis.start()
    workflows, workspace = write_loop_fixtures(tmp, {"maxTurns": 2000, "maxWallClockSeconds": 3600})
    env = bench_env(stack.redis.url, tmp / "data", WORKTRAIN_WORKFLOWS_DIR=str(workflows))
    model, stack.model_url = start_fake_model(
        tmp, env, "--compact", "--latency", str(latency), "--finish-after", str(10**9)
    )
    stack.children["fakemodel"] = model
    if model_nice:
        renice(model.process.pid, model_nice)
    stack.web_port = free_port()
    web = [str(BIN / "worktrain"), "web", "--port", str(stack.web_port)]
    stack.children["web"] = Child.spawn("web", web, env, tmp)
    worker_env = {**env, "ANTHROPIC_BASE_URL": stack.model_url, "ANTHROPIC_API_KEY": "bench-dummy"}
    for i, argv in enumerate(worker_commands(sessions, processes, concurrency)):
        stack.children[f"workers-{i + 1}"] = Child.spawn(f"workers-{i + 1}", argv, worker_env, tmp)
    return stack, workspace


def api(
    port: int, method: str, path: str, body: Any = None, conn: http.client.HTTPConnection | None = None
) -> Any:
    own = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    payload = None if body is None else json.dumps(body).encode()
    declared = payload is not None or method in ("POST", "PATCH", "DELETE")  # state changes are JSON
    own.request(method, path, payload, {"Content-Type": "application/json"} if declared else {})
    response = own.getresponse()
    data = json.loads(response.read())
    if conn is None:
        own.close()
    if response.status >= 300:
        raise RuntimeError(f"{method} {path}: {response.status} {data}")
    return data


def wait_until(what: str, predicate: Any, stack: Stack, timeout: float) -> float:
    """Seconds it took; raises with the children's logs on a timeout or a dead child."""
    started = time.monotonic()
    while not predicate():
        for child in stack.children.values():
            if child.process.poll() is not None:
                raise RuntimeError(f"{child.name} exited:\n{child.tail()}")
        if time.monotonic() - started > timeout:
            logs = "\n".join(f"--- {c.name}\n{c.tail(1500)}" for c in stack.children.values())
            raise TimeoutError(f"{what}: not within {timeout:.0f}s\n{logs}")
        time.sleep(0.2)
    return time.monotonic() - started


def worker_count(redis_url: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.scard("rq:workers:worktrain"))
    finally:
        client.close()


def session_turns(port: int, ids: list[str]) -> list[int]:
    listed = api(port, "GET", "/api/v2/sessions?limit=1000")["data"]["sessions"]
    turns = {s["sessionId"]: s["turnCount"] for s in listed}
    return [turns.get(sid, 0) for sid in ids]


def coordinator(port: int, ids: list[str], seconds: float, interval: float) -> tuple[list[Steer], list[str]]:
    """Steer each session every `interval` s for `seconds` s, spread evenly; 4 threads."""
    start = time.time() + 0.5
    plan = sorted(
        (start + round_ * interval + i * interval / len(ids), i, round_)
        for round_ in range(int(seconds / interval))
        for i in range(len(ids))
    )
    steers: list[Steer] = []
    errors: list[str] = []
    lock = threading.Lock()
    local = threading.local()

    def send(item: tuple[float, int, int]) -> None:
        at, i, round_ = item
        time.sleep(max(at - time.time(), 0))
        sid = ids[i]
        text = f"Steer {round_} for session {i} ({sid[-6:]}): keep going."
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            sent = time.time()
            reply = api(port, "POST", f"/api/v2/sessions/{sid}/steer", {"text": text}, local.conn)
            steer = Steer(sid, text, reply["steer"]["offset"], sent, time.time() - sent, sent - at)
            with lock:
                steers.append(steer)
        except (OSError, RuntimeError, http.client.HTTPException) as exc:
            local.__dict__.pop("conn", None)
            with lock:
                errors.append(f"{sid} round {round_}: {exc}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, plan))
    return steers, errors


def delivered_offsets(redis_url: str, ids: list[str]) -> int:
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    total = 0
    for sid in ids:
        total += sum(
            len(json.loads(f["offsets"]))
            for _, f in client.xrange(f"wt:session:{{{sid}}}:steers")
            if f.get("type") == "delivered"
        )
    client.close()
    return total


def fake_requests(model_url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{model_url}/_fake/requests", timeout=60) as response:
        requests: list[dict[str, Any]] = json.loads(response.read())["requests"]
    return requests


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    stack, workspace = start_stack(
        args.sessions, args.latency, args.model_nice, args.processes, args.concurrency
    )
    try:
        wait_until("web up", lambda: _healthy(stack.web_port), stack, 60)
        want = args.sessions if args.concurrency == 1 else args.processes
        ready = wait_until("workers registered", lambda: worker_count(stack.redis.url) >= want, stack, 120)
        print(f"  {want} workers registered in {ready:.1f}s", file=sys.stderr)
        baseline = redis_used_memory(stack.redis.url)
        time.sleep(2)  # the workers settle (imports, the scheduler's first pass)
        pool_pids = [c.process.pid for n, c in stack.children.items() if n.startswith("workers")]
        idle_pss = tier_pss_kib(pool_pids)
        body = {
            "workflowId": LOOP_WORKFLOW_ID,
            "goal": "Loop until stopped.",
            "workspacePath": str(workspace),
        }
        ids = [
            api(stack.web_port, "POST", "/api/v2/auto/dispatch", body)["data"]["sessionId"]
            for _ in range(args.sessions)
        ]
        running = wait_until(
            "every session running", lambda: min(session_turns(stack.web_port, ids)) >= 1, stack, 120
        )
        print(f"  {args.sessions} sessions running in {running:.1f}s", file=sys.stderr)
        roots = {name: [child.process.pid] for name, child in stack.children.items()}
        assert stack.redis.process is not None
        roots["redis"] = [stack.redis.process.pid]
        cpu_before = {name: tree_cpu_seconds(pids) for name, pids in roots.items()}
        window = time.monotonic()
        window_start = time.time()
        steers, errors = coordinator(stack.web_port, ids, args.seconds, args.interval)
        window = time.monotonic() - window
        cpu = {name: tree_cpu_seconds(pids) - cpu_before[name] for name, pids in roots.items()}
        window_end = time.time()
        print(f"  {len(steers)} steers accepted, {len(errors)} errors", file=sys.stderr)
        wait_until(
            "every steer delivered", lambda: delivered_offsets(stack.redis.url, ids) >= len(steers), stack, 60
        )
        report = Report(stack.redis.url, stack.model_url, stack.web_port, ids, steers, errors)
        report.target_ms = args.target_ms
        report.window = (window_start, window_end)
        report.memory(pool_pids, baseline)
        report.tier_memory(idle_pss, tier_pss_kib(pool_pids))
        report.cancel_all(lambda: wait_until("every session cancelled", report.all_finished, stack, 120))
        requests = fake_requests(stack.model_url)
        report.check(requests)
        calls = sum(1 for r in requests if window_start <= r["t"] <= window_end)
        report.cpu_per_call(cpu, calls, window, args.latency)
        report.print(cpu, window, args)
    except BaseException:
        stack.stop()
        print(f"  the run failed: its logs and data kept in {stack.tmp}", file=sys.stderr)
        raise
    else:
        stack.stop()
        shutil.rmtree(stack.tmp, ignore_errors=True)
    print(f"took {time.monotonic() - started:.0f}s")


def tier_pss_kib(pool_pids: list[int]) -> int:
    """PSS of the whole worker tier: every `worktrain worker` and everything below it."""
    return sum(memory_kib(pid)[1] for pid in descendants(pool_pids))


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
            return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--latency", type=float, default=1.0, help="fake model seconds per call")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (with --concurrency > 1)")
    parser.add_argument("--concurrency", type=int, default=1, help="sessions per worker process")
    parser.add_argument("--target-ms", type=float, default=50.0, help="the steer-to-model p99 target")
    parser.add_argument(
        "--model-nice",
        type=int,
        default=0,
        help="nice value of the fake model (negative: root only), which stands for an API that "
        "does not share these cores",
    )
    args = parser.parse_args(argv)
    print(f"\n{machine_line()}", file=sys.stderr)
    run(args)


if __name__ == "__main__":
    main()
