"""The loop's hooks: what cuts across every step of a turn — the fence's checks, metrics,
tracing, the crash tests' kill points — registered on the attempt by the runner, so that the
loop (daemon/agent/loop.py) only names the points it passes.

The shape is dramatiq's middleware (and Temporal's interceptors): a `LoopHook` overrides the
points it cares about; every other point does nothing. `Hooks`, the attempt's list, runs a
point's hooks in a fixed order: at a point *before* something (`before_*`, `turn_started`)
in the order they were registered, at a point *after* something (`after_*`, `tool_done`,
`steers_checkpointed`, `attempt_ended`) in the reverse order, and around a call (the model
call, a tool call) the first registered is the outermost. So the hook registered first is
the outermost on both sides of a step: the runner registers the crash points first
(daemon/session/runner.py `loop_hooks`), so a kill before a tool call comes before the
fence's check and a kill after the model call after it (docs/durability.md).

The production hooks are daemon/agent/attempthooks.py (fencing, metrics, tracing) and
daemon/agent/crashpoints.py (only under a fault plan).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext

from daemon.schema.records import PendingSteer
from daemon.turn.messages import ToolResultBlock, ToolUseBlock


class LoopHook:
    """One concern at the loop's points; each point does nothing unless overridden."""

    def before_turn(self) -> None:
        """The top of a turn, its limits checked, before it is bound."""

    def turn_started(self, turn: int) -> None:
        """The turn is bound and announced (`turn_started`), before its model call."""

    def model_call(self, turn: int) -> AbstractContextManager[object]:
        """Around the turn's model call (retries and compaction included)."""
        return nullcontext()

    def before_send(self, turn: int) -> None:
        """The turn's request passed the send gate's fence check and is about to leave; its
        steers are not yet journalled delivered (daemon/agent/sendguard.py)."""

    def after_model(self, turn: int) -> None:
        """The model's reply is in, not yet journaled."""

    def after_reply(self, turn: int) -> None:
        """The reply is journaled, before its first tool call."""

    def before_tool(self, turn: int, use: ToolUseBlock) -> None:
        """Right before a tool call runs (its `tool_call_started` not yet written)."""

    def tool_call(self, turn: int, use: ToolUseBlock) -> AbstractContextManager[object]:
        """Around a tool call."""
        return nullcontext()

    def tool_done(self, turn: int, use: ToolUseBlock, result: ToolResultBlock) -> None:
        """A tool call returned its result."""

    def after_tool(self, turn: int, use: ToolUseBlock) -> None:
        """A call's result is in hand (run, or answered "effects unknown" on a resume), not
        yet journaled."""

    def after_drain(self, turn: int) -> None:
        """The turn's drain returned (its steers in flight), before its checkpoint."""

    def after_checkpoint(self, turn: int) -> None:
        """The turn's end is checkpointed with the steers it delivers (a turn that goes on)."""

    def steers_checkpointed(self, steers: Sequence[PendingSteer]) -> None:
        """A checkpoint stored these steers in the message the next request carries."""

    def attempt_ended(self) -> None:
        """The attempt's loop is over, however it ended."""


class Hooks(LoopHook):
    """The attempt's hooks, each point run over all of them in the order the module says."""

    def __init__(self, hooks: Sequence[LoopHook] = ()) -> None:
        self.hooks = tuple(hooks)
        self.forward = self.hooks  # before a step, and around it (outermost first)
        self.backward = tuple(reversed(self.hooks))  # after a step

    def before_turn(self) -> None:
        for hook in self.forward:
            hook.before_turn()

    def turn_started(self, turn: int) -> None:
        for hook in self.forward:
            hook.turn_started(turn)

    def model_call(self, turn: int) -> AbstractContextManager[object]:
        return _nested(hook.model_call(turn) for hook in self.forward)

    def before_send(self, turn: int) -> None:
        for hook in self.forward:
            hook.before_send(turn)

    def after_model(self, turn: int) -> None:
        for hook in self.backward:
            hook.after_model(turn)

    def after_reply(self, turn: int) -> None:
        for hook in self.backward:
            hook.after_reply(turn)

    def before_tool(self, turn: int, use: ToolUseBlock) -> None:
        for hook in self.forward:
            hook.before_tool(turn, use)

    def tool_call(self, turn: int, use: ToolUseBlock) -> AbstractContextManager[object]:
        return _nested(hook.tool_call(turn, use) for hook in self.forward)

    def tool_done(self, turn: int, use: ToolUseBlock, result: ToolResultBlock) -> None:
        for hook in self.backward:
            hook.tool_done(turn, use, result)

    def after_tool(self, turn: int, use: ToolUseBlock) -> None:
        for hook in self.backward:
            hook.after_tool(turn, use)

    def after_drain(self, turn: int) -> None:
        for hook in self.backward:
            hook.after_drain(turn)

    def after_checkpoint(self, turn: int) -> None:
        for hook in self.backward:
            hook.after_checkpoint(turn)

    def steers_checkpointed(self, steers: Sequence[PendingSteer]) -> None:
        for hook in self.backward:
            hook.steers_checkpointed(steers)

    def attempt_ended(self) -> None:
        for hook in self.backward:
            hook.attempt_ended()


@contextmanager
def _nested(managers: Iterator[AbstractContextManager[object]]) -> Iterator[None]:
    """Enter the managers in order (the first outermost), leave them in reverse."""
    with ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield
