"""docker-compose.yml, read the way the tests need it: the commands and environment of the
web and worker services, so that the end-to-end test runs exactly what compose runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def load_compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return data


def service(name: str) -> dict[str, Any]:
    services: dict[str, Any] = load_compose()["services"]
    return dict(services[name])


def service_command(name: str) -> list[str]:
    command = service(name)["command"]
    assert isinstance(command, list), f"{name}.command must be a list (exec form)"
    return [str(part) for part in command]


def service_environment(name: str) -> dict[str, str]:
    env = service(name).get("environment", {})
    assert isinstance(env, dict)
    return {str(k): str(v) for k, v in env.items()}
