"""End to end with real processes: redis-server, `worktrain web`, `worktrain worker`, and the
fake Anthropic API (`python -m daemon.fakemodel`), which the real SDK in the worker talks to.

A two-step session is dispatched; while turn 1's model call is held, a coordinator sends
every kind of steer; once released, the next model request must carry the step-2 text and
the two accepted steers, in order, after the tool results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.host.embedded_redis import RedisServer, free_port
from tests.tiers import fixture_tier

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_WORKFLOWS = ROOT / "tests" / "fixtures" / "workflows"
TWO_STEP = json.loads((FIXTURE_WORKFLOWS / "two-step.json").read_text())
STEP2 = TWO_STEP["steps"][1]["prompt"]
TOKEN = "e2e-test-token-6a1f9e2d8c3b7a4f5e0d1c2b3a4f5e6d"


def http(method: str, url: str, body: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def wait_until(predicate: Any, what: str, timeout: float = 60.0, procs: list[Any] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        for proc in procs or []:
            if proc.process.poll() is not None:
                raise RuntimeError(f"{proc.name} exited early:\n{proc.log()}")
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@dataclass
class Stack:
    tmp: Path
    redis: RedisServer
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)
    web_url: str = ""
    model_url: str = ""

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        log_path = self.tmp / f"{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                args, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        proc = Proc(name, process, log_path)
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log()}" for p in self.procs)


@pytest.fixture
@fixture_tier("e2e")
def stack(tmp_path: Path) -> Iterator[Stack]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "WORKTRAIN_DATA_DIR": str(tmp_path / "data"),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "WORKTRAIN_API_TOKEN": TOKEN,
        "WORKTRAIN_IDLE_WAIT_SECONDS": "2",
        "HOME": str(tmp_path),
    }
    stack = Stack(tmp_path, server, env)
    try:
        model = stack.spawn(
            "fakemodel", [sys.executable, "-m", "daemon.fakemodel", "--port", "0", "--hold"], env
        )
        line = wait_until(lambda: model.log_path.read_text().strip(), "the fake model's URL", procs=[model])
        stack.model_url = line.split()[-1]
        port = free_port()
        web_args = [
            sys.executable,
            "-m",
            "cli",
            "web",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        web = stack.spawn("web", web_args, env)
        stack.web_url = f"http://127.0.0.1:{port}"
        worker_env = {**env, "ANTHROPIC_BASE_URL": stack.model_url, "ANTHROPIC_API_KEY": "e2e-dummy-key"}
        worker = stack.spawn(
            "worker", [sys.executable, "-m", "cli", "worker", "--processes", "1"], worker_env
        )
        wait_until(
            lambda: http("GET", f"{stack.web_url}/readyz")[0] == 200, "web /readyz", procs=[web, worker]
        )
        yield stack
    finally:
        for proc in reversed(stack.procs):
            proc.stop()
        server.stop()


def sse_events(url: str) -> list[dict[str, Any]]:
    """Read a session's SSE stream to its end (it ends after session_completed)."""
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {TOKEN}"})
    events = []
    with urllib.request.urlopen(request, timeout=30) as response:
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("data:"):
                events.append(json.loads(line[5:].strip()))
    return events


def dispatch_two_step(api: str, workspace: Path) -> str:
    """Dispatch the bundled two-step workflow in a fresh `workspace`; its session id."""
    workspace.mkdir()
    (workspace / "README.md").write_text("# e2e\n")
    status, body = http(
        "POST",
        f"{api}/auto/dispatch",
        {"workflowId": "two-step", "goal": "g", "workspacePath": str(workspace)},
    )
    assert status == 202, body
    return str(body["data"]["sessionId"])


def test_steer_a_running_session_end_to_end(stack: Stack, tmp_path: Path) -> None:
    api = f"{stack.web_url}/api/v2"
    sid = dispatch_two_step(api, tmp_path / "ws")
    steer_url = f"{api}/sessions/{sid}/steer"

    # turn 1's model call is held by the fake model
    wait_until(
        lambda: len(http("GET", f"{stack.model_url}/_fake/requests")[1]["requests"]) == 1, "turn 1's call"
    )
    wait_until(lambda: http("GET", f"{api}/sessions/{sid}")[1]["data"]["turnId"] == 1, "live turn 1")

    status, a = http("POST", steer_url, {"text": "steer A", "expectedTurnId": 1, "clientMsgId": "coord-1"})
    assert (status, a["status"], a["steer"]) == (
        200,
        "accepted",
        {"turnId": 1, "offset": 1, "clientMsgId": "coord-1"},
    )
    status, dup = http("POST", steer_url, {"text": "steer A", "clientMsgId": "coord-1"})
    assert (status, dup["status"], dup["steer"]) == (200, "duplicate", a["steer"])
    status, reuse = http("POST", steer_url, {"text": "something else", "clientMsgId": "coord-1"})
    assert (status, reuse["code"]) == (422, "client_msg_id_reuse")
    status, stale = http("POST", steer_url, {"text": "stale one", "expectedTurnId": 7})
    assert (status, stale["code"], stale["currentTurnId"]) == (409, "stale_turn", 1)
    status, b = http("POST", steer_url, {"text": "steer B"})
    assert (status, b["status"], b["steer"]["offset"]) == (200, "accepted", 2)

    assert http("POST", f"{stack.model_url}/_fake/release", {})[0] == 200
    final = wait_until(
        lambda: (r := http("GET", f"{api}/sessions/{sid}")[1]["data"])["status"] == "completed" and r,
        "the session to complete",
        procs=stack.procs,
    )
    assert (final["outcome"], final["turnCount"], final["stepIndex"], final["pendingSteers"]) == (
        "workflow_complete", 2, 2, 0,
    )  # fmt: skip

    # the next model request: [tool_result..., text(step 2 + A + B)]
    requests = http("GET", f"{stack.model_url}/_fake/requests")[1]["requests"]
    assert len(requests) == 2, stack.logs()
    last = requests[1]["messages"][-1]
    assert last["role"] == "user"
    assert [block["type"] for block in last["content"]] == ["tool_result"] * 3 + ["text"]
    assert last["content"][-1]["text"] == f"{STEP2}\n\nsteer A\n\nsteer B"

    # the coordinator's receipt, in the session's event stream (SSE, ends at completion)
    events = sse_events(f"{api}/sessions/{sid}/events")
    delivered = [e for e in events if e["kind"] == "steer_delivered"]
    assert [(e["turnId"], e["offsets"]) for e in delivered] == [(2, [1, 2])]
    assert events[-1]["kind"] == "session_completed" and events[-1]["outcome"] == "workflow_complete"

    # report_issue landed in wt:issues and in the JSONL mirror
    status, issues = http("GET", f"{api}/issues?sessionId={sid}")
    assert status == 200 and [i["kind"] for i in issues["data"]["issues"]] == ["self_correction"]
    client = redis.Redis.from_url(stack.redis.url, decode_responses=True)
    assert [f["sessionId"] for _, f in client.xrange("wt:issues")] == [sid]  # type: ignore[union-attr]
    mirror = tmp_path / "data" / "issues" / f"{sid}.jsonl"
    assert [json.loads(line)["sessionId"] for line in mirror.read_text().splitlines()] == [sid]

    # steering a finished session: 404 session_finished, saying how it ended
    status, gone = http("POST", steer_url, {"text": "too late"})
    assert (status, gone["code"], gone["status"], gone["outcome"]) == (
        404,
        "session_finished",
        "completed",
        "workflow_complete",
    )

    # every accepted steer exactly once in what the agent was sent (the final transcript's
    # user messages; the demo agent quotes what it received in its own replies), the refused
    # ones never
    history = [json.loads(raw) for raw in client.lrange(f"wt:session:{{{sid}}}:history", 0, -1)]  # type: ignore[union-attr]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant", "user"]
    sent = "\n".join(b.get("text", "") for m in history if m["role"] == "user" for b in m["content"])
    assert sent.count("steer A") == 1 and sent.count("steer B") == 1
    transcript = json.dumps(history)
    assert (
        "something else" not in transcript and "stale one" not in transcript and "too late" not in transcript
    )
    status, journal = http("GET", f"{api}/sessions/{sid}/steers")
    assert status == 200
    views = [(v["offset"], v["text"], v["state"], v["deliveredTurnId"]) for v in journal["data"]["steers"]]
    assert views == [(1, "steer A", "delivered", 2), (2, "steer B", "delivered", 2)]
    client.close()
