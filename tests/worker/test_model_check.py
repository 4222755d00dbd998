"""A worker whose model client cannot be built refuses to start, with the SDK's sentence,
instead of forking RQ workers that each fail as they start (RQ's pool forked a new one every
second, a traceback each, for as long as it ran): worker/shared.py `check_model_client`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.host.config import load_settings
from daemon.host.embedded_redis import RedisServer
from tests.cli.conftest import ROOT
from worker.shared import ModelUnavailable, check_model_client

pytestmark = pytest.mark.processes

OWN_VARIABLES = ("WORKTRAIN_", "REDIS_", "AWS_", "CLOUD_ML")
NO_REGION = {"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "CLOUD_ML_REGION": ""}


@pytest.fixture
def no_cloud_region(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in NO_REGION:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))  # no profile's region either
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


@pytest.mark.parametrize(("provider", "missing"), [("bedrock", "AWS region"), ("vertex", "region")])
def test_a_provider_without_its_region_is_refused(
    no_cloud_region: None, monkeypatch: pytest.MonkeyPatch, provider: str, missing: str
) -> None:
    monkeypatch.setenv("WORKTRAIN_MODEL_PROVIDER", provider)
    with pytest.raises(
        ModelUnavailable, match=rf"WORKTRAIN_MODEL_PROVIDER={provider}\) cannot be built: .*{missing}"
    ):
        check_model_client(load_settings())


def test_a_client_that_builds_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKTRAIN_MODEL_PROVIDER", "anthropic")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # the fake's place; never called
    check_model_client(load_settings())


def test_worker_refuses_to_start_and_forks_nothing(redis_server: RedisServer, tmp_path: Path) -> None:
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKTRAIN_", "REDIS_", "AWS_", "CLOUD_ML"))
        },
        "REDIS_URL": redis_server.url,
        "WORKTRAIN_DATA_DIR": str(tmp_path / "data"),
        "WORKTRAIN_FORBID_REAL_API": "1",
        "WORKTRAIN_MODEL_PROVIDER": "vertex",
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli", "worker"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "Error: the model client (WORKTRAIN_MODEL_PROVIDER=vertex) cannot be built" in done.stderr
    assert "No region was given" in done.stderr
    assert "Starting worker pool" not in done.stderr
