"""The loop's hooks (daemon/agent/hooks.py): the order a point runs them in, the runner's
registration (the fence's checks where they were, the crash points outermost and only under
a fault plan), and a production loop that names no crash point."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from daemon.agent.attempthooks import Fencing
from daemon.agent.crashpoints import CrashPoints
from daemon.agent.hooks import Hooks, LoopHook
from daemon.bus.fleet.metrics import NULL_RECORDER
from daemon.host.faults import POINTS, FaultPlan
from daemon.session.runner import loop_hooks
from daemon.turn.messages import ToolUseBlock

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SID = "sess_01JD0000000000000000000000"
USE = ToolUseBlock(id="t1", name="Read", input={"path": "a"})


class Recording(LoopHook):
    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    def before_tool(self, turn: int, use: ToolUseBlock) -> None:
        self.seen.append(f"{self.name} before")

    def after_model(self, turn: int) -> None:
        self.seen.append(f"{self.name} after")

    def tool_call(self, turn: int, use: ToolUseBlock) -> AbstractContextManager[object]:
        @contextmanager
        def around() -> Iterator[None]:
            self.seen.append(f"{self.name} enter")
            yield
            self.seen.append(f"{self.name} leave")

        return around()


def test_before_in_order_after_in_reverse_around_first_outermost() -> None:
    seen: list[str] = []
    hooks = Hooks([Recording("a", seen), Recording("b", seen)])
    hooks.before_tool(1, USE)
    with hooks.tool_call(1, USE):
        seen.append("tool")
    hooks.after_model(1)
    assert seen == [
        *("a before", "b before"),
        *("a enter", "b enter", "tool", "b leave", "a leave"),
        *("b after", "a after"),
    ]


def test_a_kill_before_a_tool_comes_before_the_fence_and_one_after_the_model_after_it() -> None:
    """As the loop made them inline: `in_tool` then the guard; the guard then `after_model`."""
    seen: list[str] = []
    for point in ("in_tool", "after_model"):
        plan = FaultPlan(point, 1, kill=lambda point=point: seen.append(point))  # type: ignore[misc]
        hooks = loop_hooks(SID, lambda: seen.append("guard"), NULL_RECORDER, ["Read"], plan)
        hooks.before_tool(1, USE)
        hooks.after_model(1)
    assert seen == ["in_tool", "guard", "guard", "guard", "guard", "after_model"]


def test_the_fence_is_always_registered_the_crash_points_only_under_a_plan() -> None:
    def guard() -> None:
        pass

    production = loop_hooks(SID, guard, NULL_RECORDER, ["Read"], None)
    assert not [h for h in production.hooks if isinstance(h, CrashPoints)]
    [fencing] = [h for h in production.hooks if isinstance(h, Fencing)]
    assert fencing.guard is guard
    armed = loop_hooks(SID, guard, NULL_RECORDER, ["Read"], FaultPlan("after_drain", 1))
    assert isinstance(armed.hooks[0], CrashPoints)


def test_every_loop_point_of_the_fault_plan_is_a_crash_point_hook() -> None:
    """Each point the crash tests arm in the loop is hit by the hook, under its name."""
    hit: list[str] = []

    class Plan(FaultPlan):
        def hit(self, name: str) -> None:
            hit.append(name)

    points = CrashPoints(Plan("x", 1))
    points.before_turn()
    points.before_send(1)
    points.after_model(1)
    points.after_reply(1)
    points.before_tool(1, USE)
    points.after_tool(1, USE)
    points.after_drain(1)
    points.after_checkpoint(1)
    assert sorted(hit) == sorted(p for p in POINTS if p not in ("before_claim", "fork_pinned"))


def test_the_loop_names_no_crash_point() -> None:
    """The production loop carries no test-only names: no string in it is a fault point."""
    for module in ("loop.py", "attempt.py", "attempthooks.py", "hooks.py"):
        tree = ast.parse((ROOT / "daemon" / "agent" / module).read_text())
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        assert not strings & set(POINTS), (module, strings & set(POINTS))
