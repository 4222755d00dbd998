"""docker-compose.yml on a real Docker engine, driven as README's "Docker Compose" says (issue 47).

Runs once per CI run, in its own step of .ci/run (WORKTRAIN_COMPOSE_E2E=1; the two suite
passes skip it: it does not depend on the Redis the suite runs against). Skips, saying why,
where no engine or Compose v2 can be had (tests/e2e/dockerengine.py). The base images are
pulled, or stand-ins built from Debian's packages (scripts/compose-base-images); an engine's
images and build cache are kept, so a later run rebuilds nothing that did not change.

README's lines run as written (`README_STEPS`; each is checked to still be in README.md), in
a copy of the repository's files, with three things in the environment only: the project
name (COMPOSE_PROJECT_NAME, so a stack of the user's own is never touched), the fake model
(COMPOSE_PROFILES=fakemodel and .env's two fake-model lines, as README's "Without an
Anthropic key" says) and COMPOSE_FILE adding tests/e2e/compose.host-build.yml (the image is
built on the host's network). .env gets a free host port, and the CLI's URL that port.

Then: every service healthy; redis-server not root; every worker with every sandbox layer on
(`/api/v2/workers`); a repository put in as README says; dispatch through the published
port with the CLI (a path that exists only in the containers) and with curl; a steer
delivered; a worktree session's branch in the repository on the workspaces volume;
`down`/`up` keeping sessions, events and the branch; a worker's process killed with SIGKILL
(a crash): Docker restarts its container and the session resumes and completes; a worker
stopped with `docker kill` (a stop on purpose, which Docker never undoes): the other worker
resumes its session, and `up -d` brings it back. Phase times and the layers are printed
(.ci/run runs this with -s).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.host.embedded_redis import free_port
from daemon.sandbox.report import missing
from tests.cli.test_e2e import worktrain_argv
from tests.e2e.dockerengine import Engine, NoEngine, compose_v2, engine

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FILES = (
    "Dockerfile", "docker-compose.yml", ".env.example", ".dockerignore", "pyproject.toml",
    "README.md", "requirements.lock", "daemon", "web", "worker", "cli", "workflows", "docker",
)  # fmt: skip
README_STEPS = (
    "cp .env.example .env",
    "docker compose up --build -d --wait",
    "(umask 077; sed -n 's/^WORKTRAIN_API_TOKEN=//p' .env > ~/.worktrain-token)",
    'export WORKTRAIN_URL=http://127.0.0.1:3456 WORKTRAIN_API_TOKEN_FILE="$HOME/.worktrain-token"',
    "worktrain sessions",
    "tar -C ~/src/repo -c . | docker compose exec -T worker sh -c "
    "'mkdir -p /workspaces/repo && tar -C /workspaces/repo -x'",
    "worktrain dispatch explore-and-document 'Map this repo' --workspace /workspaces/repo",
)
STEER = "Coordinator: mention the README in your notes."
FAKE_LATENCY = "3"  # seconds an answer: a turn long enough to steer and to kill a worker in


@dataclass
class Stack:
    engine: Engine
    folder: Path  # the copy of the repository compose runs in
    home: Path
    port: int
    token: str
    timings: dict[str, float]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {**self.engine.env, "HOME": str(self.home), "PATH": f"{Path(worktrain_argv()[0]).parent}:"
                + self.engine.env.get("PATH", os.defpath)}  # fmt: skip

    def sh(self, line: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        """One shell line in the project folder, with README's port for this stack's."""
        line = line.replace("127.0.0.1:3456", f"127.0.0.1:{self.port}")
        done = subprocess.run(
            ["bash", "-c", line], cwd=self.folder, env=self.env(), capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        return done

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`worktrain ARGS` as README's export line sets it up."""
        line = f"{README_STEPS[3]}; worktrain " + " ".join(map(_quote, args))
        return self.sh(line, timeout=120, check=False)

    def api(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path, json.dumps(body).encode() if body is not None else None,
            {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.load(response)
            return answer

    def compose(self, *args: str, timeout: float = 600) -> str:
        return self.sh("docker compose " + " ".join(map(_quote, args)), timeout=timeout).stdout


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _copy_project(folder: Path) -> None:
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, folder / name)
    (folder / "tests" / "e2e").mkdir(parents=True)
    shutil.copy2(ROOT / "tests" / "e2e" / "compose.host-build.yml", folder / "tests" / "e2e")


def _fill_env(env_file: Path, port: int) -> str:
    """What README leaves to the user: the two secrets, the fake model's lines uncommented,
    and (the test's own) a free host port and a shorter fake-model answer."""
    token = secrets.token_urlsafe(32)
    lines = []
    for line in env_file.read_text().splitlines():
        if line == "WORKTRAIN_API_TOKEN=":
            line += token
        elif line == "REDIS_PASSWORD=":
            line += secrets.token_urlsafe(32)
        elif line.startswith(("# ANTHROPIC_BASE_URL=http://fakemodel", "# ANTHROPIC_API_KEY=fake-model")):
            line = line[2:]
        lines.append(line)
    lines += [f"WORKTRAIN_HOST_PORT={port}", f"WORKTRAIN_FAKE_LATENCY={FAKE_LATENCY}"]
    env_file.write_text("\n".join(lines) + "\n")
    return token


def _timed(timings: dict[str, float], name: str, started: float) -> None:
    timings[name] = round(time.monotonic() - started, 1)
    print(f"compose e2e: {name}: {timings[name]} s", flush=True)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if os.environ.get("WORKTRAIN_COMPOSE_E2E") != "1":
        pytest.skip("runs once per CI run in its own step of .ci/run: set WORKTRAIN_COMPOSE_E2E=1 to run it")
    base = tmp_path_factory.mktemp("compose")
    timings: dict[str, float] = {}
    started = time.monotonic()
    try:
        found = engine()
    except NoEngine as exc:
        pytest.skip(f"no Docker engine: {exc}")
    try:
        try:
            version = compose_v2(found, base / "docker-config")
        except NoEngine as exc:
            pytest.skip(str(exc))
        print(f"compose e2e: {'; '.join(found.notes)}; Compose {version}", flush=True)
        images = subprocess.run(
            [str(ROOT / "scripts" / "compose-base-images")], env=found.env, capture_output=True, text=True,
            timeout=1200,
        )  # fmt: skip
        print(images.stderr, flush=True)
        if images.returncode != 0 and os.geteuid() != 0:
            pytest.skip(f"the base images cannot be had here: {images.stderr.strip()[-300:]}")
        assert images.returncode == 0, images.stderr
        _timed(timings, "engine and base images", started)
        yield from _up(found, base, timings)
    finally:
        found.stop()


def _up(found: Engine, base: Path, timings: dict[str, float]) -> Iterator[Stack]:
    folder, home = base / "worktrain", base / "home"
    folder.mkdir()
    home.mkdir()
    _copy_project(folder)
    found.env.update(
        COMPOSE_PROJECT_NAME="worktrain-e2e", COMPOSE_PROFILES="fakemodel",
        COMPOSE_FILE=os.pathsep.join(["docker-compose.yml", "tests/e2e/compose.host-build.yml"]),
    )  # fmt: skip
    port = free_port()
    stack = Stack(found, folder, home, port, "", timings)
    stack.sh(README_STEPS[0])
    stack.token = _fill_env(folder / ".env", port)
    try:
        started = time.monotonic()
        stack.sh(README_STEPS[1], timeout=1500)
        _timed(timings, "up --build --wait", started)
        stack.sh(README_STEPS[2])  # the CLI's copy of .env's token
        yield stack
    finally:
        logs = stack.sh("docker compose logs --no-color --tail 40", check=False).stdout
        (base / "compose.log").write_text(logs)
        stack.sh("docker compose down -v --remove-orphans", timeout=300, check=False)
        print(f"compose e2e: phases {json.dumps(timings)}", flush=True)


def _services(stack: Stack) -> list[dict[str, Any]]:
    out = stack.compose("ps", "--all", "--format", "json")
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [item for row in rows for item in (row if isinstance(row, list) else [row])]


def _wait(what: str, check: Any, timeout: float = 180.0, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def _events(stack: Stack, session_id: str) -> list[dict[str, Any]]:
    followed = stack.cli("events", "--session", session_id, "--follow", "--json")
    assert followed.returncode == 0, followed.stderr
    return [json.loads(line) for line in followed.stdout.splitlines()]


def _session(stack: Stack, session_id: str) -> dict[str, Any]:
    shown = stack.cli("session", session_id, "--json")
    assert shown.returncode == 0, shown.stderr
    data: dict[str, Any] = json.loads(shown.stdout)["data"]
    return data


def test_readme_steps_bring_up_a_healthy_stack_whose_redis_is_not_root(stack: Stack) -> None:
    readme = (ROOT / "README.md").read_text()
    for line in README_STEPS:
        assert line in readme, f"README's Docker Compose section no longer says: {line}"
    services = _services(stack)
    assert sorted(s["Service"] for s in services) == ["fakemodel", "redis", "web", "worker", "worker"]
    assert {s["Name"]: s["Health"] for s in services} == {s["Name"]: "healthy" for s in services}
    status = stack.compose("exec", "-T", "redis", "sh", "-c", "grep -E '^(Name|Uid):' /proc/1/status")
    name, uid = (line.split()[1] for line in status.splitlines())
    assert name == "redis-server" and uid != "0", status  # the entrypoint dropped to `redis`
    listed = stack.cli("sessions")
    assert listed.returncode == 0 and "no sessions" in listed.stdout + listed.stderr, listed.stderr


def test_every_worker_runs_every_sandbox_layer(stack: Stack) -> None:
    def two_workers() -> list[dict[str, Any]]:
        workers: list[dict[str, Any]] = stack.api("/api/v2/workers")["data"]["workers"]
        return workers if len(workers) == 2 else []

    workers = _wait("two workers", two_workers)
    for worker in workers:
        layers = worker["sandbox"]
        print(f"compose e2e: worker {worker['id']} sandbox {json.dumps(layers)}", flush=True)
        assert layers["mode"] == "required" and missing(layers) == set(), layers
        assert layers["pid_namespace"].startswith("on") and layers["network"].startswith("none")
        assert layers["ipc_namespace"] == "on" and layers["seccomp"].startswith("on")


def test_dispatch_through_the_published_port_with_the_cli_and_curl_and_steer(stack: Stack) -> None:
    repo = stack.home / "src" / "repo"
    repo.mkdir(parents=True)
    (repo / "README.md").write_text("# sample\n")
    for git in ("git init -q -b main", "git add -A", "git -c user.name=t -c user.email=t@e commit -qm init"):
        subprocess.run(git.split(), cwd=repo, check=True, capture_output=True)
    stack.sh(README_STEPS[5])
    started = time.monotonic()
    dispatched = stack.sh(f"{README_STEPS[3]}; {README_STEPS[6]}")  # /workspaces/repo: not on this host
    session_id = dispatched.stdout.strip()
    assert session_id.startswith("sess_"), dispatched.stdout + dispatched.stderr
    steered = stack.cli("steer", session_id, STEER, "--client-msg-id", "compose-e2e-1")
    assert steered.returncode == 0 and steered.stdout.startswith("accepted: offset 1"), steered.stdout
    events = _events(stack, session_id)
    assert events[-1]["kind"] == "session_completed" and events[-1]["outcome"] == "workflow_complete"
    assert [e["offsets"] for e in events if e["kind"] == "steer_delivered"] == [[1]]
    _timed(stack.timings, "a steered session (CLI)", started)
    body = {"workflowId": "explore-and-document", "goal": "Map it (curl)"}
    body["workspacePath"] = "/workspaces/repo"
    curl = stack.sh(
        f"curl -sS -f -H 'Authorization: Bearer {stack.token}' -H 'Content-Type: application/json' "
        f"-d '{json.dumps(body)}' http://127.0.0.1:3456/api/v2/auto/dispatch"
    )
    by_curl = json.loads(curl.stdout)["data"]["sessionId"]
    assert _events(stack, by_curl)[-1]["outcome"] == "workflow_complete"


def test_a_worktree_session_delivers_its_branch_to_the_workspaces_volume(stack: Stack) -> None:
    dispatched = stack.cli(
        "dispatch", "explore-and-document", "Map it on a branch", "--workspace", "/workspaces/repo",
        "--branch-strategy", "worktree",
    )  # fmt: skip
    session_id = dispatched.stdout.strip()
    assert dispatched.returncode == 0, dispatched.stderr
    assert _events(stack, session_id)[-1]["outcome"] == "workflow_complete"
    delivery = _session(stack, session_id)["delivery"]
    assert delivery["state"] == "delivered" and delivery["branch"] == f"worktrain/{session_id}", delivery
    branches = stack.compose("exec", "-T", "web", "git", "-C", "/workspaces/repo", "branch", "--list")
    assert f"worktrain/{session_id}" in branches  # on the volume, as web (another container) sees it


def test_down_and_up_keep_sessions_events_and_workspaces(stack: Stack) -> None:
    before = json.loads(stack.cli("sessions", "--json").stdout)["data"]
    started = time.monotonic()
    stack.compose("down", timeout=300)
    stack.compose("up", "-d", "--wait", timeout=600)
    _timed(stack.timings, "down, up --wait", started)
    after = json.loads(stack.cli("sessions", "--json").stdout)["data"]
    assert after["totalCount"] == before["totalCount"] == 3
    assert {s["sessionId"]: s["status"] for s in after["sessions"]} == {
        s["sessionId"]: "completed" for s in before["sessions"]
    }
    first = before["sessions"][-1]["sessionId"]
    assert _events(stack, first)[0]["kind"] == "session_queued"
    assert "worktrain/" in stack.compose("exec", "-T", "worker", "git", "-C", "/workspaces/repo", "branch")


def _worker_containers(stack: Stack) -> dict[str, dict[str, Any]]:
    """Each worker container's inspect data, by its hostname (what `/api/v2/workers` names)."""
    ids = stack.compose("ps", "-q", "worker").split()
    inspected = json.loads(stack.sh("docker inspect " + " ".join(ids)).stdout)
    return {c["Config"]["Hostname"]: c for c in inspected}


def test_a_worker_killed_with_sigkill_comes_back_and_its_session_resumes(stack: Stack) -> None:
    session_id, host = _dispatch_and_find_its_worker(stack, "Survive a crash")
    victim = _worker_containers(stack)[host]
    restarts = victim["RestartCount"]
    started = time.monotonic()
    os.kill(victim["State"]["Pid"], signal.SIGKILL)  # a crash: not `docker kill`, a stop on purpose
    events = _events(stack, session_id)
    _timed(stack.timings, "SIGKILL to the session's end", started)
    assert events[-1]["kind"] == "session_completed" and events[-1]["outcome"] == "workflow_complete"
    resumed = [e for e in events if e["kind"] == "session_resumed"]
    assert resumed, [e["kind"] for e in events]
    print(f"compose e2e: killed {host}; resumed by {resumed[-1]['worker']}", flush=True)

    def restarted() -> dict[str, Any] | None:
        container = _worker_containers(stack)[host]
        return container if container["RestartCount"] > restarts and container["State"]["Running"] else None

    _wait("Docker to restart the killed worker", restarted)
    _wait("the restarted worker healthy", lambda: restarted_health(stack, host) == "healthy")


def restarted_health(stack: Stack, host: str) -> str:
    return str(_worker_containers(stack)[host]["State"]["Health"]["Status"])


def _dispatch_and_find_its_worker(stack: Stack, goal: str) -> tuple[str, str]:
    """A new session's id and the hostname of the worker container running it."""
    dispatched = stack.cli("dispatch", "explore-and-document", goal, "--workspace", "/workspaces/repo")
    session_id = dispatched.stdout.strip()
    assert dispatched.returncode == 0, dispatched.stderr

    def running_on() -> str | None:
        workers = stack.api("/api/v2/workers")["data"]["workers"]
        return next((w["host"] for w in workers if session_id in w["sessions"]), None)

    return session_id, _wait("the session to run on a worker", running_on, timeout=60, every=0.2)


def test_a_worker_stopped_with_docker_kill_stays_stopped_and_the_other_resumes(stack: Stack) -> None:
    """`docker kill` is a stop on purpose (Docker never restarts it): the issue's trial, where
    the one worker left must take the session over."""
    _wait("both workers healthy", lambda: all(s["Health"] == "healthy" for s in _services(stack)))
    session_id, host = _dispatch_and_find_its_worker(stack, "Survive docker kill")
    victim = _worker_containers(stack)[host]
    started = time.monotonic()
    stack.sh(f"docker kill -s KILL {victim['Id']}")
    events = _events(stack, session_id)
    _timed(stack.timings, "docker kill to the session's end", started)
    assert events[-1]["kind"] == "session_completed" and events[-1]["outcome"] == "workflow_complete"
    resumed = [e for e in events if e["kind"] == "session_resumed"]
    assert resumed and not resumed[-1]["worker"].startswith(f"{host}:"), resumed
    stopped = json.loads(stack.sh(f"docker inspect {victim['Id']}").stdout)[0]["State"]
    assert (stopped["Running"], stopped["ExitCode"]) == (False, 137)
    stack.compose("up", "-d", "--wait", timeout=600)  # what brings it back
    assert all(s["Health"] == "healthy" for s in _services(stack))
