"""`continue_workflow` (README's Coding sessions): complete the current step and get the next one.

The engine (daemon.workflows.engine) decides; this tool turns its answer into the tool
result: the next step (whose text also goes to the turn's delivery, README's HTTP API), `complete`,
or `blocked` with what is missing, so the agent can call again. With `"gates": "steer"`, a
step whose `requireConfirmation` holds answers `awaiting_confirmation`: the agent ends its
turn and the next step comes with the coordinator's steer.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from daemon.schema.events import StepAdvanced
from daemon.tools.base import CursorChange, Tool, ToolContext, ToolOutput, WorkflowCursor
from daemon.workflows.engine import Advanced, StepOutput, advance

DESCRIPTION = (
    "Complete the current workflow step and move to the next one. Call it once the step's "
    "work is done, with notes (at least 50 characters) saying what you did and found; put "
    "facts later steps need in `context` (a key set to null is removed) and the step's typed "
    'outputs in `artifacts` (e.g. {"kind": "wr.loop_control", "decision": "stop"} to leave a '
    'loop, or a wr.assessment). Returns the next step\'s title and prompt, {"status": '
    '"complete"}, or {"status": "blocked"} with what is missing: fix it and call again. '
    "Workflow texts written for WorkRail say `output.notesMarkdown` or `complete_step`: they "
    "mean this tool's `notes` and this tool."
)
CONFIRMATION_MESSAGE = (
    "Step {step!r} needs the coordinator's confirmation before the workflow goes on. End your turn "
    "now (reply without calling a tool); the next step arrives together with their reply."
)
STILL_WAITING = (
    "The workflow is waiting for the coordinator's confirmation of the last step. End your turn now "
    "(reply without calling a tool); the next step arrives together with their reply."
)


class ContinueWorkflowInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    notes: str = Field(
        min_length=50, description="What you did in this step and what you found (at least 50 characters)."
    )
    context: dict[str, Any] | None = Field(
        default=None, description="Facts to carry forward (key/value; merged shallowly, null deletes a key)."
    )
    artifacts: list[dict[str, Any]] | None = Field(
        default=None, description="The step's typed outputs, e.g. wr.loop_control or wr.assessment objects."
    )


def continue_workflow(args: ContinueWorkflowInput, ctx: ToolContext) -> ToolOutput:
    cursor = ctx.cursor
    if cursor.complete:
        return ToolOutput(json.dumps({"status": "complete"}))
    if cursor.fatal_issue:
        message = "Notes recorded; the session ends now."
        ended = json.dumps({"status": "ended", "reason": "fatal_issue", "message": message})
        return ToolOutput(ended, cursor=CursorChange(ended_fatal=True))
    if cursor.awaiting_confirmation:
        return ToolOutput(
            json.dumps({"status": "awaiting_confirmation", "message": STILL_WAITING}), is_error=True
        )
    pending = cursor.engine_state.pending
    output = StepOutput(notes=args.notes, context=args.context, artifacts=list(args.artifacts or []))
    result = advance(cursor.program, cursor.engine_state, output)
    if not isinstance(result, Advanced):
        blocked = {
            "status": "blocked",
            "stepId": pending.stepId if pending else None,
            "reasons": [reason.as_json() for reason in result.reasons],
            "message": "This step is not complete and nothing of this call was kept: fix what the reasons "
            "say, then call continue_workflow again with the notes, context and artifacts.",
        }
        return ToolOutput(json.dumps(blocked), is_error=True)
    gated = result.confirm and cursor.gates == "steer"
    change = CursorChange(state=result.state, awaiting_confirmation=gated)
    cursor = cursor.changed(change)  # the position this call moves to (the loop applies it)
    step = cursor.current
    ctx.events.emit(
        StepAdvanced(
            sessionId=ctx.session_id,
            turnId=ctx.turn_id,
            fromStepId=result.completed_step,
            toStepId=step.step_id if step else None,
            stepIndex=cursor.index,
            stepCount=cursor.step_count,
            notes=args.notes,
            context=args.context,
            artifacts=args.artifacts,
        )
    )
    if gated:
        message = CONFIRMATION_MESSAGE.format(step=result.completed_step)
        body = {"status": "awaiting_confirmation", "gateKind": result.gate_kind, "message": message}
        return ToolOutput(json.dumps(body), cursor=change)
    return _advanced(cursor, change)


def _advanced(cursor: WorkflowCursor, change: CursorChange) -> ToolOutput:
    step = cursor.current
    if step is None:
        return ToolOutput(json.dumps({"status": "complete"}), cursor=change)
    body: dict[str, Any] = {
        "status": "advanced",
        "step": {"id": step.step_id, "title": step.title, "prompt": step.prompt},
        "stepIndex": cursor.index,
        "stepCount": cursor.step_count,
    }
    if step.loop_id is not None and step.iteration is not None:
        body["loop"] = {"id": step.loop_id, "iteration": step.iteration + 1}
    return ToolOutput(json.dumps(body), step_text=step.prompt, cursor=change)


CONTINUE_WORKFLOW = Tool("continue_workflow", DESCRIPTION, ContinueWorkflowInput, continue_workflow)
