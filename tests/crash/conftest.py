"""The crash tests start real processes: each test gets a stack factory that kills them all."""

from __future__ import annotations

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
