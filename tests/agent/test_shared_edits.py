"""Small changes this work made to shared files, pinned."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_python_package_is_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        str(init.parent.relative_to(ROOT)).replace("/", ".")
        for top in ("daemon", "web", "worker", "cli", "workflows")
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"


def test_the_test_guard_against_the_real_api_is_on() -> None:
    assert os.environ["WORKTRAIN_FORBID_REAL_API"] == "1"


def test_wait_for_steers_takes_a_fractional_timeout(bus: SteerBus) -> None:
    registry = SessionRegistry(bus.client, bus.keys)
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp"))
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    cursor = channel.take().cursor
    assert channel.wait_for_steers(cursor, 0.05) is False
    bus.accept(sid, "now")
    assert channel.wait_for_steers(cursor, 0.05) is True
