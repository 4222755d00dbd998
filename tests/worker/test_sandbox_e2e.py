"""Issue 21 end to end: a real `worktrain worker` (as root here, finding A3's setting), a Redis
with a password, and the fake model over HTTP making the agent attack from its own Bash under
`WORKTRAIN_SANDBOX_NETWORK=none` and `egress`: WorkTrain's ports (Redis, web), another
session's server and workspace, the data dir, the worker user's home. Then it does ordinary
work (files, git) in its workspace, which must still work."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.bus.jobspec import job_queue
from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.fakemodel import FakeModelServer, demo_rule, reply, tool
from daemon.host.embedded_redis import RedisServer
from daemon.sandbox import landlock, report
from tests.worker.test_worker_secrets import tool_results

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_WORKFLOWS = ROOT / "tests" / "fixtures" / "workflows"
PASSWORD = "redis-pw-e2e21-" + "a1b2" * 6

ATTACK = r"""
import os, socket, sys
def attempt(what, action):
    try:
        action(); print(what, "OK")
    except OSError as exc:
        print(what, "FAILED", exc.errno)
def connect(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s: s.sendall(b"STOLEN")
for name, port in zip(("redis", "web", "other-server"), map(int, sys.argv[1:4])):
    attempt("connect-" + name, lambda: connect(port))
def steal_web_port():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen()
attempt("bind-web", steal_web_port)
for path in sys.argv[4:]:
    try:
        print("READ", open(path).read().strip())
    except OSError as exc:
        print("read-denied", exc.errno)
"""


class Listener:
    """A server on the host's loopback (the web tier, another session's server): what reached it."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.reached: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.reached.append(conn.recv(100))
                except OSError:
                    self.reached.append(b"?")

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.server.close()


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", password=PASSWORD)
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("network", ["none", "egress"])
def test_an_agent_attacking_from_bash_reaches_nothing_of_worktrain(
    network: str, locked_redis: RedisServer, tmp_path: Path
) -> None:
    layers = report.layers()
    if network == "none" and not report.current().available.netns:
        pytest.skip(f"no network namespace here: {layers['network']}")
    if network == "egress" and landlock.abi_version()[0] < 4:
        pytest.skip(f"egress needs Landlock ABI 4: {layers['landlock']}")
    if not layers["landlock"].startswith("abi"):
        pytest.skip(f"no Landlock here: {layers['landlock']}")
    data, home, other = tmp_path / "data", tmp_path / "home", tmp_path / "other-session"
    (data / "redis").mkdir(parents=True)
    (data / "redis" / "password").write_text(PASSWORD)  # where the embedded Redis keeps it
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PLANTED-HOME-KEY")
    other.mkdir()
    (other / "notes.md").write_text("OTHER-SESSION-NOTES")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "attack.py").write_text(ATTACK)
    web, other_server = Listener(), Listener()
    reads = [data / "redis" / "password", home / ".ssh" / "id_ed25519", other / "notes.md"]
    attack = (
        f"python3 attack.py {locked_redis.port} {web.port} {other_server.port} {' '.join(map(str, reads))};"
        f" echo x > {tmp_path}/outside.txt 2>&1; echo x > {data}/up.json; grep CapEff /proc/self/status"
    )
    work = (
        "git init -q . && echo hello > hello.txt && git add hello.txt"
        " && git -c user.name=A -c user.email=a@example.com commit -qm hello && git log --oneline"
    )
    client = locked_redis.client(decode_responses=True)
    sid = SessionRegistry(client, Keys("wt")).create(
        NewSession(
            workflowId="two-step", goal="g", workspacePath=str(workspace), stepCount=2, firstStepId="look"
        )
    )
    script = [reply(tool("Bash", command=attack)), reply(tool("Bash", command=work))]
    try:
        with FakeModelServer(items=script, rule=demo_rule) as model:
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith(("WORKTRAIN_", "REDIS_"))},
                "HOME": str(home),
                "WORKTRAIN_FORBID_REAL_API": "1",
                "REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:{locked_redis.port}/0",
                "WORKTRAIN_DATA_DIR": str(data),
                "WORKTRAIN_PORT": str(web.port),
                "WORKTRAIN_SANDBOX": "required",
                "WORKTRAIN_SANDBOX_NETWORK": network,
                "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
                "WORKTRAIN_IDLE_WAIT_SECONDS": "1",
                "WORKTRAIN_MODEL": "claude-fake",
                "ANTHROPIC_BASE_URL": model.url,
                "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
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
                model.wait_for_requests(3, timeout=60)
            finally:
                worker.terminate()
                worker.wait(30)
            attacked, worked = tool_results(model.requests[1]), tool_results(model.requests[2])
    finally:
        web.close()
        other_server.close()
    log_text = log_path.read_text(errors="replace")
    assert "sandbox landlock: abi" in log_text and f"sandbox network: {network}" in log_text, log_text[-2000:]
    seen = {line.split()[0]: line for line in attacked.splitlines() if line.startswith(("connect-", "bind-"))}
    for name in ("connect-redis", "connect-web", "connect-other-server"):
        assert "FAILED" in seen[name], attacked
    if network == "egress":
        assert "FAILED 13" in seen["bind-web"], attacked  # the web port is not the agent's to share
    assert web.reached == [] and other_server.reached == []
    # the data dir's secret folder: covered (ENOENT) and Landlock-denied; the others: denied (EACCES)
    assert "READ" not in attacked and attacked.count("read-denied") == 3, attacked
    for secret in (PASSWORD, "PLANTED-HOME-KEY", "OTHER-SESSION-NOTES"):
        assert secret not in attacked
    assert "CapEff:\t0000000000000000" in attacked
    assert not (tmp_path / "outside.txt").exists() and not (data / "up.json").exists()
    assert "hello" in worked and "[exit code 0]" in worked, worked
    assert (workspace / "hello.txt").read_text() == "hello\n"
