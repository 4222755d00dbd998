"""The crash tests start real processes: each test gets a stack factory that kills them all."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.crash.harness import Stack, stacks
from tests.tiers import fixture_tier


@pytest.fixture
@fixture_tier("e2e")
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    yield from stacks(tmp_path, Stack)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long chaos runs (marker `chaos`) stay out of the default suite."""
    if os.environ.get("WORKTRAIN_CHAOS") == "1":
        return
    skip = pytest.mark.skip(reason="a long chaos run: set WORKTRAIN_CHAOS=1 to run it")
    for item in items:
        if "chaos" in item.keywords:
            item.add_marker(skip)
