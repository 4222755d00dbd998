"""Real processes against the fake model's weather: `worktrain web` and `worktrain worker`
(tests/crash/harness.py's stack) with settings of this issue's in their environment
(`extra_env`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.crash.harness import Stack, stacks
from tests.tiers import fixture_tier


@pytest.fixture
@fixture_tier("e2e")
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    yield from stacks(tmp_path, Stack)
