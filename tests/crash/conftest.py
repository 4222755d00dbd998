"""The crash tests start real processes: each test gets a stack factory that kills them all."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.crash.harness import Stack


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(**options: Any) -> Stack:
        stack = Stack(tmp_path / f"stack{len(stacks) + 1}", **options)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long chaos runs (marker `chaos`) stay out of the default suite."""
    if os.environ.get("WORKTRAIN_CHAOS") == "1":
        return
    skip = pytest.mark.skip(reason="a long chaos run: set WORKTRAIN_CHAOS=1 to run it")
    for item in items:
        if "chaos" in item.keywords:
            item.add_marker(skip)
