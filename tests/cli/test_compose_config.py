"""docker-compose.yml as users type it, checked by whichever Compose is installed (v2 or v1:
v1 still parses it, though it cannot create the workers, README "Docker Compose").

Debian's docker-compose 1.29 refused the file outright (`'name' does not match any of the
regexes: '^x-'`). Without any Compose here the validation is skipped, saying so; the
structural checks run anyway. tests/e2e/test_compose_e2e.py runs it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.compose import COMPOSE_FILE, load_compose, service

pytestmark = pytest.mark.processes

# Compose v1's schema (1.29, compose_spec.json) allows these top-level keys and `x-*` only
V1_TOP_LEVEL = {"version", "services", "networks", "volumes", "secrets", "configs"}


def compose_commands() -> list[list[str]]:
    found = []
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0
    ):
        found.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        found.append(["docker-compose"])
    return found


def test_the_file_has_only_what_compose_v1_accepts_at_the_top() -> None:
    keys = set(load_compose())
    assert keys - V1_TOP_LEVEL == {k for k in keys if k.startswith("x-")}, keys
    assert "name" not in keys


def test_redis_keeps_an_aof_and_has_a_healthcheck_and_a_sentinel_variant() -> None:
    redis = service("redis")
    assert "--appendonly yes --appendfsync everysec" in redis["command"][2]
    assert "redis-cli ping" in " ".join(redis["healthcheck"]["test"])
    text = COMPOSE_FILE.read_text()
    assert "redis+sentinel://" in text and "#  sentinel-1:" in text and "min-replicas-to-write" in text


@pytest.mark.parametrize("compose", compose_commands() or [None], ids=lambda c: " ".join(c) if c else "none")
def test_installed_compose_validates_the_file(compose: list[str] | None, tmp_path: Path) -> None:
    if compose is None:
        pytest.skip("no Docker Compose here (neither `docker compose` nor `docker-compose`): not validated")
    project = tmp_path / "worktrain"
    project.mkdir()
    shutil.copy(COMPOSE_FILE, project / "docker-compose.yml")
    shutil.copytree(COMPOSE_FILE.parent / "docker", project / "docker")  # the workers' seccomp profile
    (project / ".env").write_text("REDIS_PASSWORD=pw\nWORKTRAIN_API_TOKEN=t\n")
    answer = subprocess.run(
        [*compose, "-f", str(project / "docker-compose.yml"), "config", "-q"],
        cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
