"""`continue_workflow` (SPEC §4.3): complete the current step and get the next one."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from daemon.events import StepAdvanced
from daemon.tools.base import Tool, ToolContext, ToolOutput

DESCRIPTION = (
    "Complete the current workflow step and move to the next one. Call it once the step's "
    "work is done, with notes (at least 50 characters) saying what you did and found. "
    'Returns the next step\'s title and prompt, or {"status": "complete"} when the '
    "workflow is finished."
)


class ContinueWorkflowInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    notes: str = Field(
        min_length=50, description="What you did in this step and what you found (at least 50 characters)."
    )
    context: dict[str, Any] | None = Field(
        default=None, description="Optional facts to carry forward (key/value)."
    )


def continue_workflow(args: ContinueWorkflowInput, ctx: ToolContext) -> ToolOutput:
    cursor = ctx.cursor
    if cursor.complete:
        return ToolOutput(json.dumps({"status": "complete"}))
    if cursor.fatal_issue:
        cursor.ended_fatal = True
        return ToolOutput(
            json.dumps(
                {
                    "status": "ended",
                    "reason": "fatal_issue",
                    "message": "Notes recorded; the session ends now.",
                }
            )
        )
    previous = cursor.current
    cursor.index += 1
    step = cursor.current
    ctx.events.emit(
        StepAdvanced(
            sessionId=ctx.session_id,
            turnId=ctx.turn_id,
            fromStepId=previous.id if previous else None,
            toStepId=step.id if step else None,
            stepIndex=cursor.index,
            stepCount=cursor.step_count,
            notes=args.notes,
            context=args.context,
        )
    )
    if step is None:
        return ToolOutput(json.dumps({"status": "complete"}))
    ctx.step_texts.append(step.prompt)
    return ToolOutput(
        json.dumps(
            {
                "status": "advanced",
                "step": {"id": step.id, "title": step.title, "prompt": step.prompt},
                "stepIndex": cursor.index,
                "stepCount": cursor.step_count,
            }
        )
    )


CONTINUE_WORKFLOW = Tool("continue_workflow", DESCRIPTION, ContinueWorkflowInput, continue_workflow)
