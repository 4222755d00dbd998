"""Fixtures for the worker tests: real redis-server, the fake model over HTTP, worker env vars."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.fakemodel import FakeModelServer, demo_rule
from daemon.host.embedded_redis import RedisServer
from tests.tiers import fixture_tier

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_WORKFLOWS = ROOT / "tests" / "fixtures" / "workflows"
WORKTRAIN = [sys.executable, "-m", "cli"]


@dataclass
class WorkerEnv:
    redis_url: str
    client: redis.Redis
    rq_client: redis.Redis
    bus: SteerBus
    registry: SessionRegistry
    model: FakeModelServer
    data_dir: Path
    workspace: Path
    env: dict[str, str]

    def dispatch(self, workflow_id: str = "two-step", workspace: Path | None = None) -> str:
        return self.registry.create(
            NewSession(
                workflowId=workflow_id,
                goal="document the workspace",
                workspacePath=str(workspace or self.workspace),
                stepCount=2,
                firstStepId="look",
            )
        )

    def enqueue(self, session_id: str) -> None:
        from daemon.bus.jobspec import job_queue

        job_queue(self.rq_client).enqueue_call(
            "worker.jobs.run_session", args=(session_id,), job_id=session_id, timeout=600
        )

    def worker_process(self, *args: str) -> subprocess.Popen[bytes]:
        with open(self.data_dir / "worker.log", "ab") as log:  # the child has its own copy
            return subprocess.Popen(
                [*WORKTRAIN, "worker", *args], env=self.env, stdout=log, stderr=log, cwd=ROOT
            )

    def worker_log(self) -> str:
        path = self.data_dir / "worker.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture
@fixture_tier("redis")
def fake_model() -> Iterator[FakeModelServer]:
    with FakeModelServer(rule=demo_rule) as server:
        yield server


@pytest.fixture
def worker_env(
    redis_server: RedisServer,
    real_redis: redis.Redis,
    fake_model: FakeModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[WorkerEnv]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# A project to document\n")
    settings_env = {
        "REDIS_URL": redis_server.url,
        "WORKTRAIN_DATA_DIR": str(data_dir),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "WORKTRAIN_LEASE_SECONDS": "3",
        "WORKTRAIN_IDLE_WAIT_SECONDS": "1",
        "WORKTRAIN_MODEL": "claude-fake",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "ANTHROPIC_API_KEY": "test-dummy-key",
    }
    for name, value in settings_env.items():
        monkeypatch.setenv(name, value)
    keys = Keys("wt")
    rq_client = redis.Redis.from_url(redis_server.url)
    yield WorkerEnv(
        redis_url=redis_server.url,
        client=real_redis,
        rq_client=rq_client,
        bus=SteerBus(real_redis, keys),
        registry=SessionRegistry(real_redis, keys),
        model=fake_model,
        data_dir=data_dir,
        workspace=workspace,
        env={**os.environ},
    )
    rq_client.close()
