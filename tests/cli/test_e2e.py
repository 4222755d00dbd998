"""End to end, with real processes: `worktrain up` on a fresh HOME, and compose's commands.

`test_up_*` runs `worktrain up` with a temporary HOME and WORKTRAIN_DATA_DIR and no
REDIS_URL (so it starts the embedded Redis and, with no ANTHROPIC_API_KEY, the fake model),
dispatches a bundled workflow, steers it, sees the steer delivered and the session complete,
then sends SIGINT to the `up` process alone and checks that every process it started is gone.

`test_compose_commands_*` runs the web and worker `command`s of docker-compose.yml exactly as
written, with the compose environment (Redis and the port pointed at this machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.procs import PROC, Proc, descendants
from daemon.host.embedded_redis import RedisServer, free_port
from tests.cli.compose import service_command, service_environment
from tests.cli.conftest import Cli, wait_http_ok

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

WORKFLOW = "explore-and-document"  # bundled, three steps
STEER = "Coordinator: mention the README in your notes."


def worktrain_argv() -> list[str]:
    """The `worktrain` console script of this environment (what a user types)."""
    script = Path(sys.executable).with_name("worktrain")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli"]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKTRAIN_", "REDIS_URL"))}
    if "WORKTRAIN_FORBID_REAL_API" in os.environ:  # tests/conftest.py: the real API stays out of reach
        env["WORKTRAIN_FORBID_REAL_API"] = os.environ["WORKTRAIN_FORBID_REAL_API"]
    env.pop("ANTHROPIC_API_KEY", None)
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


def processes_mentioning(marker: str) -> list[str]:
    """Live processes whose command line or environment contains `marker`."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in blob and state != "Z":
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
            found.append(f"{entry.name}: {command!r}")
    return found


def dispatch_steered(cli: Cli, workspace: Path) -> str:
    """Dispatch WORKFLOW on a sample workspace and steer it once (STEER); returns its id."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "README.md").write_text("# sample\n")
    dispatched = cli("dispatch", WORKFLOW, "Map this sample repo", "--workspace", str(workspace))
    assert dispatched.exit_code == 0, dispatched.stderr
    session_id = dispatched.stdout.strip()
    steered = cli("steer", session_id, STEER, "--client-msg-id", "e2e-1")
    assert steered.exit_code == 0 and steered.stdout.startswith("accepted: offset 1"), steered.output
    return session_id


def run_session(cli: Cli, workspace: Path) -> tuple[str, list[dict[str, Any]]]:
    """Dispatch, steer once, follow the session's events to its end; returns (id, events)."""
    session_id = dispatch_steered(cli, workspace)
    followed = cli("events", "--session", session_id, "--follow", "--json")
    assert followed.exit_code == 0, followed.stderr
    return session_id, [json.loads(line) for line in followed.stdout.splitlines()]


def assert_steered_and_completed(cli: Cli, session_id: str, events: list[dict[str, Any]]) -> None:
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "session_queued" and kinds[-1] == "session_completed", kinds
    delivered = [e for e in events if e["kind"] == "steer_delivered"]
    assert [d["offsets"] for d in delivered] == [[1]]
    assert events[-1]["status"] == "completed" and events[-1]["outcome"] == "workflow_complete"
    code, steers = cli.json("session", session_id, "--steers")
    assert code == 0 and steers["data"]["status"] == "completed"
    [steer] = steers["steers"]["data"]["steers"]
    assert (steer["state"], steer["text"], steer["deliveredTurnId"]) == (
        "delivered",
        STEER,
        delivered[0]["turnId"],
    )


# ---- worktrain up ---------------------------------------------------------------------------


@pytest.fixture
def up_stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    yield from launch_up(tmp_path, ["--workers", "2", "--fake-latency", "0.2"])


def launch_up(tmp_path: Path, args: list[str], **extra_env: str) -> Iterator[dict[str, Any]]:
    """`worktrain up ARGS` on a fresh HOME and free ports, until it printed its banner (yields
    its process, env, port, data_dir, tmp); stopped at the end if the test left it running:
    Ctrl-C first, as a person would (SIGKILL would leave its worker tier in a warm shutdown
    that retries the Redis gone with `up` for minutes), SIGKILL only if that fails."""
    home = tmp_path / "home"
    home.mkdir()
    data_dir = home / ".worktrain"
    port = free_port()
    env = clean_env(home, WORKTRAIN_DATA_DIR=str(data_dir), **extra_env)
    argv = [*worktrain_argv(), "up", "--port", str(port), "--redis-port", str(free_port()), *args]
    out, err = (tmp_path / "up.out").open("wb"), (tmp_path / "up.err").open("wb")
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    stack = {"process": process, "env": env, "port": port, "data_dir": data_dir, "tmp": tmp_path}
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", process, timeout=60)
        deadline = time.monotonic() + 10
        while "WorkTrain is up." not in (tmp_path / "up.out").read_text():  # printed once ready
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        yield stack
    finally:
        if process.poll() is None:  # only when the test failed before its own SIGINT
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)  # `up` stops every tier within its 10 s budget
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        out.close()
        err.close()


def banner_field(text: str, name: str) -> str:
    line = next(line for line in text.splitlines() if line.strip().startswith(f"{name}:"))
    return line.split(":", 1)[1].strip()


def test_up_runs_a_steered_session_then_sigint_stops_every_process(up_stack, tmp_path):
    process: subprocess.Popen[bytes] = up_stack["process"]
    state = json.loads((up_stack["data_dir"] / "up.json").read_text())
    assert state["pid"] == process.pid and state["embeddedRedis"] is True
    banner = (tmp_path / "up.out").read_text()
    api_url = banner_field(banner, "API")
    assert api_url == f"http://127.0.0.1:{up_stack['port']}" == state["apiUrl"]
    assert banner_field(banner, "Redis").startswith(state["redisUrl"])

    # The client finds the running `up` through WORKTRAIN_DATA_DIR, without WORKTRAIN_URL.
    cli = Cli(
        url="", token=None, env={"WORKTRAIN_URL": None, "WORKTRAIN_DATA_DIR": str(up_stack["data_dir"])}
    )
    session_id, events = run_session(cli, tmp_path / "workspace")
    assert_steered_and_completed(cli, session_id, events)

    # The printed redis-cli line works as it is, pasted into a shell (it reads the password
    # from its owner-only file: the line itself carries none).
    redis_cli = banner_field(banner, "redis-cli")
    listed = subprocess.run(
        ["bash", "-c", f"{redis_cli} ZRANGE wt:sessions 0 -1"], capture_output=True, text=True
    )
    assert session_id in listed.stdout.split(), listed.stderr

    # A second `up` on the same data dir says one is running, and touches nothing.
    second = subprocess.run(
        [*worktrain_argv(), "up", "--port", str(free_port())],
        env=up_stack["env"],
        capture_output=True,
        timeout=30,
    )
    assert second.returncode == 1
    assert (
        f"WorkTrain is already running on this data dir (pid {process.pid}, API {api_url})"
        in second.stderr.decode()
    )
    assert process.poll() is None

    tree = descendants(process.pid)
    names = [_comm(p) for p in tree]
    assert "redis-server" in names and len(tree) >= 6, names  # redis, fake model, web (+2), worker (+2)

    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=15) == 0
    assert time.monotonic() - started < 10
    left = [p for p in tree if p.alive()]
    assert left == [], left
    assert processes_mentioning(str(tmp_path)) == []
    assert not (up_stack["data_dir"] / "up.json").exists()
    redis_log = (up_stack["data_dir"] / "redis" / "redis.log").read_text()
    assert "Calling fsync() on the AOF file" in redis_log and "ready to exit" in redis_log
    assert aof_bytes(up_stack["data_dir"] / "redis") > 0


def aof_bytes(redis_dir: Path) -> int:
    """What the AOF holds, in either layout: Redis 6.2's `appendonly.aof`, or 7.0+'s
    `appendonlydir/` (a manifest, a base file and incremental files)."""
    single = redis_dir / "appendonly.aof"
    if single.exists():
        return single.stat().st_size
    return sum(f.stat().st_size for f in (redis_dir / "appendonlydir").glob("*.aof"))


def _comm(proc: Proc) -> str:
    try:
        return (PROC / str(proc.pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def test_up_sigterm_stops_everything_and_a_new_up_keeps_the_data(up_stack, tmp_path):
    process: subprocess.Popen[bytes] = up_stack["process"]
    # No token given: the CLI reads the one `up` keeps in its data dir (docs/security.md).
    cli = Cli(
        f"http://127.0.0.1:{up_stack['port']}",
        token=None,
        env={"WORKTRAIN_DATA_DIR": str(up_stack["data_dir"])},
    )
    session_id, _ = run_session(cli, tmp_path / "workspace")
    tree = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert [p for p in tree if p.alive()] == []
    again = subprocess.Popen(
        [
            *worktrain_argv(),
            "up",
            "--port",
            str(up_stack["port"]),
            "--redis-port",
            str(free_port()),
            "--workers",
            "1",
        ],
        env=up_stack["env"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{up_stack['port']}/readyz", again, timeout=60)
        tree = descendants(again.pid)
        # The embedded Redis reloaded its AOF: the finished session and its journal are there.
        code, body = cli.json("session", session_id, "--steers")
        assert code == 0 and body["data"]["status"] == "completed"
        assert body["steers"]["data"]["steers"][0]["state"] == "delivered"
    finally:
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=15) == 0
    assert [p for p in tree if p.alive()] == []


# ---- the compose services' commands -----------------------------------------------------------


def compose_env(service: str, home: Path, redis_url: str, port: int, **dotenv: str) -> dict[str, str]:
    """The service's compose environment over its `.env` (`dotenv`; compose's `environment`
    wins over `env_file`), pointed at this machine's Redis, port and folders."""
    env = clean_env(home, **dotenv)
    env.update(service_environment(service))
    env.update(REDIS_URL=redis_url, WORKTRAIN_DATA_DIR=str(home / "data"), WORKTRAIN_PORT=str(port))
    assert env["WORKTRAIN_WORKSPACE_ROOTS"] == "/workspaces"  # compose's volume; here, this folder
    env["WORKTRAIN_WORKSPACE_ROOTS"] = str(home)
    return env


def compose_argv(service: str) -> list[str]:
    command = service_command(service)
    assert command[0] == "worktrain"
    return [*worktrain_argv(), *command[1:]]


@pytest.fixture
def fake_model(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "daemon.fakemodel", "--port", str(port), "--latency", "0.2"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/healthz", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def test_compose_commands_run_a_steered_session(fake_model, tmp_path):
    port = free_port()
    token = "compose-e2e-token-9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a"
    password = "compose-redis-password-" + "5e4d3c2b1a" * 2
    redis_server = RedisServer(tmp_path / "redis", password=password)  # as compose's: password required
    redis_server.start()
    dotenv = {
        "WORKTRAIN_API_TOKEN": token,
        "REDIS_PASSWORD": password,
        "ANTHROPIC_API_KEY": "fake",
        "ANTHROPIC_BASE_URL": fake_model,
    }
    started: list[subprocess.Popen[bytes]] = []
    try:
        for service in ("web", "worker", "worker"):  # two worker replicas
            env = compose_env(service, tmp_path, redis_server.url, port, **dotenv)
            log = (tmp_path / f"{service}-{len(started)}.log").open("wb")
            started.append(
                subprocess.Popen(
                    compose_argv(service), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            )
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", started[0], timeout=60)
        cli = Cli(f"http://127.0.0.1:{port}", token=token)
        assert cli("sessions", "--token", "wrong").exit_code == 4  # 0.0.0.0 with a token: auth is on
        session_id, events = run_session(cli, tmp_path / "workspace")
        assert_steered_and_completed(cli, session_id, events)
    finally:
        trees = [p for process in started for p in descendants(process.pid)]
        for process in started:
            process.send_signal(signal.SIGTERM)  # what `docker compose stop` sends
        codes = [process.wait(timeout=20) for process in started]
        redis_server.stop()
    assert codes == [0, 0, 0]
    assert [p for p in trees if p.alive()] == []


# ---- worktrain demo ---------------------------------------------------------------------------


def test_demo_starts_steers_and_finishes_a_session_and_leaves_nothing_behind(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = clean_env(home, TMPDIR=str(tmp))
    result = subprocess.run([*worktrain_argv(), "demo"], env=env, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "no ANTHROPIC_API_KEY, so the agent talks to the bundled fake model" in out
    assert ">> steer sent while turn 1 is live" in out
    assert "steer delivered into turn 2: offsets [1]" in out
    assert "session completed: workflow_complete" in out
    assert "1/1 steer(s) delivered" in out
    assert list(tmp.iterdir()) == []  # the temporary stack folder is gone
    assert processes_mentioning(str(tmp)) == []
