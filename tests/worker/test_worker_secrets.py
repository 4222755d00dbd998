"""The agent's Bash against a real `worktrain worker` (issue 10, findings 1 and 2): with the
API key, the API token and a Redis password in the worker's environment, a command the
model asks for reads `/proc/$PPID/environ`, every `/proc/*/environ` it can see, and tries
`redis-cli` on the steer bus. None of it yields a secret or another session's steers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.bus.jobspec import job_queue
from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.fakemodel import FakeModelServer, demo_rule, reply, tool
from daemon.host.embedded_redis import RedisServer, find_binary
from daemon.sandbox import report
from tests.agent.procscan import environ_and_cmdline, processes_with

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_WORKFLOWS = ROOT / "tests" / "fixtures" / "workflows"
API_KEY = "sk-ant-api-" + "4f9a1c" * 6
TOKEN = "worker-must-never-see-" + "7d2e8b" * 5
PASSWORD = "redis-pw-" + "c3a9e1" * 5
OTHER_STEER = "the other session's confidential steer"


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", password=PASSWORD)
    server.start()
    yield server
    server.stop()


def exploit_command(redis_port: int, other: str) -> str:
    cli = find_binary("redis-cli")
    return (
        "echo ppid=$PPID; tr '\\0' '\\n' < /proc/$PPID/environ; "
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done; env; "
        f"{cli} -p {redis_port} LRANGE 'wt:session:{{{other}}}:steer' 0 -1 2>&1; echo done"
    )


def tool_results(request: dict[str, Any]) -> str:
    texts = []
    for message in request["messages"]:
        if isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    texts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(texts)


def test_an_agents_bash_finds_no_secret_and_cannot_use_the_steer_bus(
    locked_redis: RedisServer, tmp_path: Path
) -> None:
    client = locked_redis.client(decode_responses=True)
    keys = Keys("wt")
    registry = SessionRegistry(client, keys)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# x\n")
    other = registry.create(NewSession(workflowId="two-step", goal="g", workspacePath="/tmp", stepCount=2))
    SteerBus(client, keys).accept(other, OTHER_STEER)
    sid = registry.create(
        NewSession(
            workflowId="two-step", goal="g", workspacePath=str(workspace), stepCount=2, firstStepId="look"
        )
    )
    bash = reply(tool("Bash", command=exploit_command(locked_redis.port, other)))
    data_dir = tmp_path / "data"
    with FakeModelServer(items=[bash], rule=demo_rule) as model:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("WORKTRAIN_", "REDIS_"))},
            "WORKTRAIN_FORBID_REAL_API": "1",
            "REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:{locked_redis.port}/0",  # as a user would give it
            "WORKTRAIN_DATA_DIR": str(data_dir),
            "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
            "WORKTRAIN_IDLE_WAIT_SECONDS": "1",
            "WORKTRAIN_MODEL": "claude-fake",
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": API_KEY,
            "WORKTRAIN_API_TOKEN": TOKEN,
        }
        job_queue(locked_redis.client()).enqueue_call(
            "worker.jobs.run_session", args=(sid,), job_id=sid, timeout=600
        )
        log_path = tmp_path / "worker.log"
        with open(log_path, "wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "cli", "worker", "--processes", "1"],
                env=env,
                stdout=log,
                stderr=log,
                cwd=ROOT,
            )
        try:
            model.wait_for_requests(2, timeout=60)
            seen = {pid: environ_and_cmdline(pid) for pid in _tree(worker.pid)}  # while the session runs
        finally:
            worker.terminate()
            worker.wait(30)
        output = tool_results(model.requests[1])
    log_text = log_path.read_text(errors="replace")
    assert "done" in output and "ppid=0" in output, output[:2000]
    for secret in (API_KEY, TOKEN, PASSWORD, OTHER_STEER):
        assert secret not in output, f"{secret[:12]}... reached the agent"
        assert secret not in log_text, f"{secret[:12]}... is in the worker's log"
    if report.current().available.netns:  # the default `none` network: Redis is not even reachable
        assert "Could not connect to Redis" in output and "Connection refused" in output
    else:
        assert "NOAUTH" in output  # the steer bus refused the unauthenticated command
    assert len(seen) >= 3, seen.keys()  # pool parent, RQ worker, work horse
    for pid, blob in seen.items():
        for secret in (API_KEY, TOKEN, PASSWORD):
            assert secret.encode() not in blob, f"{secret[:12]}... in /proc/{pid}/environ or cmdline"
    assert processes_with(str(data_dir)) == []  # nothing of it outlived the worker


def _tree(root: int) -> list[int]:
    from cli.procs import descendants

    deadline = time.monotonic() + 10
    while len(found := [root, *(p.pid for p in descendants(root))]) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_the_redis_password_is_required(locked_redis: RedisServer) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=locked_redis.port).ping()
    assert locked_redis.client().ping()
    assert PASSWORD.encode() not in Path(f"/proc/{locked_redis.process.pid}/cmdline").read_bytes()  # type: ignore[union-attr]
