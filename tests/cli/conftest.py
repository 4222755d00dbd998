"""Fixtures for the CLI tests: a real `worktrain web` process on the test Redis.

Client commands run in-process through click's CliRunner (fast), or as real subprocesses
where the exit code, signals or the imported modules are what is tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from cli.main import main
from daemon.bus.fleet.workers import WorkerPresence
from daemon.bus.keys import Keys
from daemon.host.embedded_redis import RedisServer, free_port
from tests.tiers import fixture_tier

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_WORKFLOWS = ROOT / "tests" / "fixtures" / "workflows"
TOKEN = "cli-test-token-2b4d6f8a0c1e3a5c7e9b1d3f5a7c9e1b"


def wait_http_ok(url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(url)
        time.sleep(0.05)


@dataclass
class WebProcess:
    url: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


def start_web(
    tmp: Path, redis_url: str | None, token: str | None = TOKEN, extra: tuple[str, ...] = ()
) -> WebProcess:
    port = free_port()
    env = {
        **os.environ,
        "WORKTRAIN_DATA_DIR": str(tmp / "data"),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "HOME": str(tmp),  # (gunicorn, if chosen, keeps a control socket under $HOME)
    }
    env.pop("WORKTRAIN_API_TOKEN", None)
    env.pop("REDIS_URL", None)
    if token:
        env["WORKTRAIN_API_TOKEN"] = token
    if redis_url:
        env["REDIS_URL"] = redis_url
    log_path = tmp / "web.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
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
                *extra,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    web = WebProcess(f"http://127.0.0.1:{port}", process, tmp / "data", log_path)
    try:
        wait_http_ok(f"{web.url}/readyz", process)
    except BaseException:
        web.stop()
        raise
    return web


@pytest.fixture(scope="session")
@fixture_tier("processes")
def web_process(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebProcess]:
    web = start_web(tmp_path_factory.mktemp("cli-web"), redis_server.url)
    yield web
    web.stop()


@dataclass
class Cli:
    """Runs `worktrain ...` in-process against the test web tier."""

    url: str
    token: str | None = TOKEN
    env: dict[str, str | None] = field(default_factory=dict)

    def __call__(self, *args: str, input: str | None = None, **env: str | None) -> Result:
        full_env: dict[str, str | None] = {"WORKTRAIN_URL": self.url, "WORKTRAIN_API_TOKEN": self.token}
        full_env.update(self.env)
        full_env.update(env)
        return CliRunner().invoke(main, list(args), env=full_env, input=input, catch_exceptions=False)

    def json(self, *args: str, **env: str | None) -> tuple[int, Any]:
        result = self(*args, "--json", **env)
        return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def cli(web_process: WebProcess, real_redis: redis.Redis) -> Cli:
    return Cli(web_process.url)


def publish_worker(client: redis.Redis, filesystem: str | None = None) -> WorkerPresence:
    """A live worker's presence as a worker publishes it (daemon/bus/fleet/workers.py): one on this
    host's filesystem (the default, as under `worktrain up`), or with another `filesystem`
    (a worker in a container, on another host)."""
    presence = WorkerPresence(Keys("wt"), 1, list, {})
    if filesystem is not None:
        presence.filesystem = filesystem
    pipe = client.pipeline()
    presence.stage(pipe)
    pipe.execute()
    return presence


@pytest.fixture
def worker_here(real_redis: redis.Redis) -> WorkerPresence:
    """A live worker that sees this host's files: the CLI checks workspaces here."""
    return publish_worker(real_redis)
