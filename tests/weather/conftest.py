"""Real processes against the fake model's weather: `worktrain web` and `worktrain worker`
(tests/crash/harness.py's stack) with settings of this issue's in their environment."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.crash.harness import Stack

pytestmark = pytest.mark.e2e


@dataclass
class WeatherStack(Stack):
    """The crash tests' stack, plus environment variables for every process it starts."""

    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.extra_env}

    def events_of(self, sid: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events(sid) if e["kind"] == kind]


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., WeatherStack]]:
    stacks: list[WeatherStack] = []

    def make(**options: Any) -> WeatherStack:
        stack = WeatherStack(tmp_path / f"stack{len(stacks) + 1}", **options)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()
