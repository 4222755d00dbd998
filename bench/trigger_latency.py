"""Triggers (README's Triggers), against the loopback fake of GitHub: (1) from a signed webhook to the
session's first model request, (2) what a poller costs when nothing changes.

    .venv/bin/python bench/trigger_latency.py [--events 100] [--gap 0.2] [--idle-seconds 60]

One command: starts its own redis-server, the fake Messages API (`--rule walk`, no latency),
`worktrain web` and `worktrain worker --processes P --concurrency C` with a triggers file of
two triggers — a GitHub webhook (issues.labeled) and a GitHub poll (issues, every 10 s) —
and the fake GitHub in this process (tests/fakes/github.py).

(1) For each of `--events` issues: the issue is labelled, its `issues.labeled` delivery is
signed and POSTed to `/api/v2/triggers/bench-hook` (one every `--gap` seconds); measured per
session, from just before the POST to the arrival of the session's first request at the
fake model (its `_at`; one clock: this machine's). (2) With nothing changing on the fake,
the poller is watched for `--idle-seconds`: its requests by status and the rate limit they
spent, then said per hour at the file's default interval (60 s).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, Child, bench_env, machine_line, median, percentile, table

sys.path.insert(0, str(ROOT))

from daemon.host.embedded_redis import RedisServer, free_port
from tests.fakes.github import TOKEN as GH_TOKEN
from tests.fakes.github import FakeGitHub, deliver

SECRET = "bench-trigger-secret"
TOKEN = secrets.token_urlsafe(32)
POLL_INTERVAL = 10
SESSION = re.compile(r"- Session: (sess_[0-9A-HJKMNP-TV-Z]{26})")
WORKFLOW = {
    "id": "bench-one-step",
    "name": "Bench one step",
    "steps": [{"id": "do", "title": "Do it", "prompt": "Do what the goal says, then continue."}],
}


def triggers_file(github: FakeGitHub, workspace: Path) -> str:
    return f"""\
- id: bench-hook
  source: github
  mode: webhook
  events: [issues.labeled]
  filter: {{label: agent}}
  secretEnv: BENCH_GH_SECRET
  workflowId: bench-one-step
  goal: "Fix #{{{{ issue.number }}}}: {{{{ issue.title }}}}"
  workspacePath: {workspace}
- id: bench-poll
  source: github
  mode: poll
  events: [issues]
  filter: {{label: polled}}
  tokenEnv: BENCH_GH_TOKEN
  apiUrl: {github.url}
  repo: acme/app
  interval: {POLL_INTERVAL}
  workflowId: bench-one-step
  goal: "Polled #{{{{ issue.number }}}}"
  workspacePath: {workspace}
"""


def fake_requests(model_url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{model_url}/_fake/requests", timeout=30) as response:
        return list(json.loads(response.read())["requests"])


def first_calls(model_url: str) -> dict[str, float]:
    """Each session's first model request's arrival (epoch seconds)."""
    found: dict[str, float] = {}
    for request in fake_requests(model_url):
        system = request.get("system") or ""
        text = system if isinstance(system, str) else "".join(b.get("text", "") for b in system)
        match = SESSION.search(text)
        if match:
            found[match.group(1)] = min(found.get(match.group(1), float("inf")), float(request["_at"]))
    return found


def wait(what: str, predicate: Any, timeout: float, children: list[Child]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {c.name}\n{c.tail()}" for c in children)
            raise RuntimeError(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.05)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start(
    args: argparse.Namespace, tmp: Path, server: RedisServer, github: FakeGitHub
) -> tuple[int, str, list[Child]]:
    workflows, workspace = tmp / "workflows", tmp / "ws"
    workflows.mkdir()
    workspace.mkdir()
    (workflows / "bench-one-step.json").write_text(json.dumps(WORKFLOW))
    (tmp / "triggers.yml").write_text(triggers_file(github, workspace))
    env = bench_env(server.url, tmp / "data", WORKTRAIN_WORKFLOWS_DIR=str(workflows))
    children = [
        Child.spawn(
            "fakemodel", [sys.executable, "-m", "daemon.fakemodel", "--port", "0", "--rule", "walk"], env, tmp
        )
    ]
    model_url = children[0].wait_for_line("fake model listening on").split()[-1]
    port = free_port()
    tiers = {
        **env, "ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "bench-dummy",
        "WORKTRAIN_MODEL": "claude-fake",
        "WORKTRAIN_API_TOKEN": TOKEN, "WORKTRAIN_TRIGGERS_FILE": str(tmp / "triggers.yml"),
        "BENCH_GH_SECRET": SECRET, "BENCH_GH_TOKEN": GH_TOKEN,
    }  # fmt: skip
    cli = [sys.executable, "-m", "cli"]
    children.append(Child.spawn("web", [*cli, "web", "--bind", "127.0.0.1", "--port", str(port)], tiers, tmp))
    worker = [*cli, "worker", "--processes", str(args.processes), "-c", str(args.concurrency)]
    children.append(Child.spawn("worker", worker, tiers, tmp))
    wait("web", lambda: ready(port), 60, children)
    wait("workers", lambda: children[-1].tail(100_000).count("Listening on") >= args.processes, 60, children)
    return port, model_url, children


def webhooks(
    args: argparse.Namespace, port: int, model_url: str, github: FakeGitHub, children: list[Child]
) -> list[float]:
    sent: dict[str, float] = {}
    url = f"http://127.0.0.1:{port}/api/v2/triggers/bench-hook"
    for i in range(args.events):
        issue = github.open_issue(f"Bench issue {i}", labels=["agent"])
        payload = github.issues_labeled(issue, "agent")
        at = time.time()
        answer = deliver(url, "issues", payload, SECRET)
        if answer.status != 202 or "sessionId" not in answer.body:
            raise RuntimeError(f"webhook {i}: {answer}")
        sent[answer.body["sessionId"]] = at
        time.sleep(args.gap)
    wait(
        "every first model request",
        lambda: len(set(first_calls(model_url)) & set(sent)) == len(sent),
        300,
        children,
    )
    calls = first_calls(model_url)
    return [(calls[sid] - at) * 1000 for sid, at in sent.items()]


def idle_polls(args: argparse.Namespace, github: FakeGitHub) -> tuple[dict[int, int], int, float]:
    """The poller's requests while nothing changes (after its first polls settled)."""
    time.sleep(2 * POLL_INTERVAL + 2)  # the first poll, then the one at the cursor's URL
    start, budget = time.time(), github.budget.remaining
    time.sleep(args.idle_seconds)
    polls = [r for r in github.polls() if r.at >= start]
    statuses: dict[int, int] = {}
    for r in polls:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return statuses, budget - github.budget.remaining, time.time() - start


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="wt-trigger-bench-"))
    server = RedisServer(tmp / "redis")
    server.start()
    github = FakeGitHub()
    children: list[Child] = []
    try:
        port, model_url, children = start(args, tmp, server, github)
        latencies = webhooks(args, port, model_url, github, children)
        statuses, spent, watched = idle_polls(args, github)
        print(machine_line())
        shape = f"worker --processes {args.processes} -c {args.concurrency}"
        print(f"{args.events} webhooks, one every {args.gap} s; {shape}")
        print(table(["measure", "p50", "p99", "max"], [
            ["webhook POST -> the session's first model request (ms)", f"{median(latencies):.1f}",
             f"{percentile(latencies, 99):.1f}", f"{max(latencies):.1f}"],
        ]))  # fmt: skip
        total = sum(statuses.values())
        at_60 = 3600 / watched * POLL_INTERVAL / 60  # the same polls, six times rarer
        print(
            f"idle poller, {watched:.0f} s watched at interval {POLL_INTERVAL} s: {total} requests "
            f"({', '.join(f'{n} x {s}' for s, n in sorted(statuses.items()))}), rate limit spent: {spent}; "
            f"at interval 60 s: {total * at_60:.0f} requests an hour, {spent * at_60:.0f} of the budget"
        )
    finally:
        for child in reversed(children):
            child.stop()
        server.stop()
        github.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--gap", type=float, default=0.2)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
