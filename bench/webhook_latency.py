"""Webhook delivery latency (README's Webhooks): from a session's end to its receiver's POST.

    .venv/bin/python bench/webhook_latency.py [--sessions 100] [--processes 2] [--concurrency 8]

One command: starts its own redis-server, the fake Messages API (`python -m daemon.fakemodel
--rule walk`: each step completed with one continue_workflow), `worktrain web` and `worktrain
worker --processes P --concurrency C`, and a receiver on loopback in this process (answers
204). It dispatches `--sessions` sessions of the one-step workflow, each with a
`callbackUrl` to the receiver and the signing secret set, and measures, per session, the time
from its `session_completed` event (`ts`, written by the worker when it finished the session)
to the receiver's arrival of its signed `session.finished` POST (the signature is checked).
Both clocks are this machine's wall clock. Also printed: the sessions' own run time, and
every delivery's try count (1: no retry).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import secrets
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, Child, bench_env, machine_line, median, percentile, table

sys.path.insert(0, str(ROOT))

import redis

from daemon.host.embedded_redis import RedisServer, free_port

SECRET = "bench-webhook-secret"
TOKEN = secrets.token_urlsafe(32)
WORKFLOW = {
    "id": "bench-one-step",
    "name": "Bench one step",
    "steps": [{"id": "do", "title": "Do it", "prompt": "Do what the goal says, then continue."}],
}


class Receiver:
    """Records (arrival wall time, body) of every POST whose signature checks out."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        self.bad = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                want = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                payload = json.loads(body)
                with outer.lock:
                    if not hmac.compare_digest(want, self.headers.get("X-WorkTrain-Signature", "")):
                        outer.bad += 1
                    elif payload["type"] == "session.finished":
                        outer.arrivals.setdefault(payload["sessionId"], at)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def api(port: int, method: str, path: str, body: Any = None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"content-type": "application/json", "authorization": f"Bearer {TOKEN}"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.loads(response.read()))


def wait(what: str, predicate: Any, timeout: float, children: list[Child]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {c.name}\n{c.tail()}" for c in children)
            raise RuntimeError(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.05)


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="wt-webhook-bench-"))
    server = RedisServer(tmp / "redis")
    server.start()
    children: list[Child] = []
    try:
        workflows, workspace = tmp / "workflows", tmp / "ws"
        workflows.mkdir()
        workspace.mkdir()
        (workflows / "bench-one-step.json").write_text(json.dumps(WORKFLOW))
        env = bench_env(server.url, tmp / "data", WORKTRAIN_WORKFLOWS_DIR=str(workflows))
        model = Child.spawn(
            "fakemodel", [sys.executable, "-m", "daemon.fakemodel", "--port", "0", "--rule", "walk"], env, tmp
        )
        children.append(model)
        model_url = model.wait_for_line("fake model listening on").split()[-1]
        port = free_port()
        tiers = {
            **env,
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "bench-dummy",
            "WORKTRAIN_MODEL": "claude-fake",
            "WORKTRAIN_API_TOKEN": TOKEN,
            "WORKTRAIN_WEBHOOK_SECRET": SECRET,
            "WORKTRAIN_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1/32",  # the receiver is on loopback
        }
        cli = [sys.executable, "-m", "cli"]
        children.append(
            Child.spawn("web", [*cli, "web", "--bind", "127.0.0.1", "--port", str(port)], tiers, tmp)
        )
        worker = [*cli, "worker", "--processes", str(args.processes), "-c", str(args.concurrency)]
        children.append(Child.spawn("worker", worker, tiers, tmp))
        wait("web", lambda: _ready(port), 60, children)
        wait(
            "workers",
            lambda: children[-1].tail(100_000).count("Listening on") >= args.processes,
            60,
            children,
        )
        receiver = Receiver()
        client = redis.Redis.from_url(server.url, decode_responses=True)
        started = time.monotonic()
        ids = []
        for i in range(args.sessions):
            body = {
                "workflowId": "bench-one-step",
                "goal": f"Bench session {i}",
                "workspacePath": str(workspace),
                "callbackUrl": receiver.url,
            }
            ids.append(api(port, "POST", "/api/v2/auto/dispatch", body)["data"]["sessionId"])
        wait("every session.finished", lambda: len(receiver.arrivals) >= len(ids), 600, children)
        elapsed = time.monotonic() - started
        report(args, client, ids, receiver, elapsed)
    finally:
        for child in reversed(children):
            child.stop()
        server.stop()


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def report(
    args: argparse.Namespace, client: redis.Redis, ids: list[str], receiver: Receiver, elapsed: float
) -> None:
    latencies, runs, tries = [], [], []
    for sid in ids:
        events = [json.loads(f["data"]) for _, f in client.xrange(f"wt:session:{{{sid}}}:events")]  # type: ignore[union-attr]
        ended = next(e for e in events if e["kind"] == "session_completed")
        queued = next(e for e in events if e["kind"] == "session_queued")
        end = datetime.fromisoformat(ended["ts"]).timestamp()
        latencies.append((receiver.arrivals[sid] - end) * 1000)
        runs.append(end - datetime.fromisoformat(queued["ts"]).timestamp())
        for raw in client.lrange(f"wt:session:{{{sid}}}:webhooks", 0, -1):
            record = json.loads(client.hget("wt:{webhooks}:deliveries", raw) or "{}")  # type: ignore[arg-type]
            tries.append(record.get("attempts", 0))
    print(machine_line())
    print(
        f"{len(ids)} sessions, worker --processes {args.processes} -c {args.concurrency}, "
        f"all done and told in {elapsed:.1f} s; bad signatures: {receiver.bad}; "
        f"tries per delivery: max {max(tries)}, {sum(t > 1 for t in tries)} retried"
    )
    rows = [
        ["session_completed -> receiver (ms)", f"{median(latencies):.1f}", f"{percentile(latencies, 99):.1f}",
         f"{max(latencies):.1f}"],
        ["session run, queued -> completed (s)", f"{median(runs):.2f}", f"{percentile(runs, 99):.2f}",
         f"{max(runs):.2f}"],
    ]  # fmt: skip
    print(table(["measure", "p50", "p99", "max"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
