"""The crash tests' kill points in the loop (daemon/host/faults.py lists them all): a hook the
runner registers only when the session's fault plan exists, first, so a kill before a step
comes before the fence's check and one after a step after it (daemon/agent/hooks.py). A
production attempt has no plan, so no such hook: the loop itself names no point."""

from __future__ import annotations

from daemon.agent.hooks import LoopHook
from daemon.host.faults import FaultPlan, crash_point
from daemon.turn.messages import ToolUseBlock


class CrashPoints(LoopHook):
    """The loop's points under the names the crash tests arm (`worktrainFault.point`; a
    `Point` literal, so a misspelt name fails the type check)."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan

    def before_turn(self) -> None:
        crash_point(self.plan, "before_turn")

    def before_send(self, turn: int) -> None:
        crash_point(self.plan, "before_send")

    def after_model(self, turn: int) -> None:
        crash_point(self.plan, "after_model")

    def after_reply(self, turn: int) -> None:
        crash_point(self.plan, "after_reply")

    def before_tool(self, turn: int, use: ToolUseBlock) -> None:
        crash_point(self.plan, "in_tool")

    def after_tool(self, turn: int, use: ToolUseBlock) -> None:
        crash_point(self.plan, "after_tool")

    def after_drain(self, turn: int) -> None:
        crash_point(self.plan, "after_drain")

    def after_checkpoint(self, turn: int) -> None:
        crash_point(self.plan, "after_checkpoint")
