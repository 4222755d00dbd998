"""`signal_coordinator` (README's Sub-agents and questions): the agent speaks to its coordinator without
ending its step.

A progress note, a finding, a result — or a question: with `wait: true` (kinds `question`,
`blocked`) the session parks (`waitingFor: "reply"`) after this turn until the next steer,
and that steer comes back as this call's result (daemon/agent/replywait.py). The tool
itself only writes the signal; the loop does the waiting, at the turn's end, where steers
are taken.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from daemon.schema.events import CoordinatorSignal
from daemon.schema.signals import SignalKind
from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.tools.inputcap import FREE_FORM_CAP_BYTES, within_cap

DESCRIPTION = (
    "Tell the coordinator watching this session something without ending your step: "
    "progress, a finding, a result, or a question. With wait=true (kinds question or blocked) "
    "you pause until the coordinator replies, and the reply is this call's result."
)
WAITS = ("question", "blocked")
REPLY_PENDING = "[WorkTrain] waiting for the coordinator's reply"


class SignalInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: SignalKind
    summary: str = Field(min_length=1, max_length=200, description="One line, at most 200 characters.")
    data: dict[str, Any] | None = Field(
        default=None,
        description=f"Structured details, if any (at most {FREE_FORM_CAP_BYTES // 1024} KiB as JSON).",
    )
    wait: bool = Field(default=False, description="Pause until the coordinator replies (question, blocked).")

    @field_validator("data")
    @classmethod
    def _capped(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return within_cap(value, "data")  # type: ignore[no-any-return]


def signal_coordinator(args: SignalInput, ctx: ToolContext) -> ToolOutput:
    if ctx.coordinator is None:
        raise ToolError("signal_coordinator is not available in this session.")
    if args.wait and args.kind not in WAITS:
        raise ToolError(f"wait=true is for kinds {' and '.join(WAITS)}, not {args.kind!r}.")
    if args.wait and ctx.awaiting is not None:
        raise ToolError("Only one signal per turn can wait for a reply; this turn already asked.")
    offset = ctx.coordinator.signal(ctx.turn_id, args.kind, args.summary, args.data, args.wait)
    event = CoordinatorSignal(
        sessionId=ctx.session_id,
        turnId=ctx.turn_id,
        offset=offset,
        signalKind=args.kind,
        summary=args.summary,
        wait=args.wait,
    )
    if args.wait:
        # The event waits until the loop has parked the session (`waitingFor: reply`): a
        # coordinator that reads the record when it sees the event finds the question waiting.
        return ToolOutput(REPLY_PENDING, awaits_reply=event)  # replaced by the reply before the model sees it
    ctx.events.emit(event)
    return ToolOutput(f"Signal {offset} sent to the coordinator ({args.kind}). Carry on with your work.")


SIGNAL_COORDINATOR = Tool("signal_coordinator", DESCRIPTION, SignalInput, signal_coordinator)
