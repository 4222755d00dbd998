"""The hooks every attempt registers (daemon/agent/hooks.py): the fence's checks, the loop's
metrics, its tracing spans. Each keeps what it needs between points itself."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime

from daemon.agent.hooks import LoopHook
from daemon.bus.fleet.metrics import STEER_DELIVERY, TOOL_CALLS, MetricsRecorder
from daemon.host import tracing
from daemon.schema.records import PendingSteer
from daemon.turn.messages import ToolResultBlock, ToolUseBlock

log = logging.getLogger(__name__)


class Fencing(LoopHook):
    """The fence's checks the loop makes (docs/durability.md, "fencing reaches every side
    effect"): when the model call returns — the reply may have come back to an attempt frozen
    or cut off past its lease, and no tool runs on it — and right before each tool call. The
    model call's own checks are the model call's (daemon/agent/modelcall.py, sendguard.py), a
    tool's right before its side effect the tool's (`ToolContext.guard`)."""

    def __init__(self, guard: Callable[[], None]) -> None:
        self.guard = guard

    def after_model(self, turn: int) -> None:
        self.guard()

    def before_tool(self, turn: int, use: ToolUseBlock) -> None:
        self.guard()


class Metrics(LoopHook):
    """Each steer's accept-to-request latency (`STEER_DELIVERY`: from its acceptedAt to the
    start of the turn whose request carries it) and the tool calls by tool and result."""

    def __init__(self, metrics: MetricsRecorder, tools: Collection[str]) -> None:
        self.metrics = metrics
        self.tools = tools  # the toolbox's names: any other is counted "unknown" (bounded labels)
        self.carrying: list[str] = []  # acceptedAt of the steers the next request carries

    def steers_checkpointed(self, steers: Sequence[PendingSteer]) -> None:
        self.carrying.extend(steer.acceptedAt for steer in steers)

    def turn_started(self, turn: int) -> None:
        if not self.carrying:
            return
        now = datetime.now(UTC)
        for accepted_at in self.carrying:
            try:
                accepted = datetime.fromisoformat(accepted_at.replace("Z", "+00:00"))
            except ValueError:
                log.warning("steer acceptedAt %r is not a time; its delivery is not measured", accepted_at)
                continue
            self.metrics.observe(STEER_DELIVERY, (now - accepted).total_seconds())
        self.carrying.clear()

    def tool_done(self, turn: int, use: ToolUseBlock, result: ToolResultBlock) -> None:
        name = use.name if use.name in self.tools else "unknown"
        self.metrics.count(TOOL_CALLS, tool=name, result="error" if result.is_error else "ok")


class Tracing(LoopHook):
    """The turn's span (begun at a turn's start, ended at the next one's or the attempt's
    end), each tool call's span, and the model call carrying the trace of the steers its
    request delivers (their POST spans' traceparents: daemon/host/tracing.py)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.turn = tracing.TurnSpan()
        self.carrying: list[str] = []  # traceparents of the steers the next request carries

    def steers_checkpointed(self, steers: Sequence[PendingSteer]) -> None:
        self.carrying.extend(steer.traceparent for steer in steers if steer.traceparent)

    def turn_started(self, turn: int) -> None:
        self.turn.begin({"worktrain.session_id": self.session_id, "worktrain.turn": turn})

    def model_call(self, turn: int) -> AbstractContextManager[object]:
        traces, self.carrying = self.carrying, []
        return tracing.carrying(traces)

    def tool_call(self, turn: int, use: ToolUseBlock) -> AbstractContextManager[object]:
        return tracing.span("worktrain.tool", {"worktrain.tool": use.name, "worktrain.turn": turn})

    def attempt_ended(self) -> None:
        self.turn.end()
