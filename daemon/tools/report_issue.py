"""`report_issue` (README's Coding sessions): the agent says what went wrong instead of failing silently."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from daemon.schema.events import IssueReported
from daemon.schema.issues import Issue, IssueKind, Severity
from daemon.tools.base import CursorChange, Tool, ToolContext, ToolOutput
from daemon.tools.inputcap import FREE_FORM_CAP_BYTES, within_cap

DESCRIPTION = (
    "Record a problem for the humans and coordinators watching this session: a tool that "
    "failed, something blocking you, unexpected behaviour, a decision that needs a human, or "
    "a mistake you corrected. Use severity 'fatal' only when the work cannot go on."
)

FATAL_REPLY = (
    "Issue recorded (severity=fatal). Now call continue_workflow with notes explaining the "
    "blocker (what you tried, what is missing); the session ends after that call."
)


class ReportIssueInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: IssueKind
    severity: Severity
    summary: str = Field(min_length=1, max_length=200, description="One line, at most 200 characters.")
    context: str | dict[str, Any] | None = Field(
        default=None,
        description=f"Details: what happened, where (at most {FREE_FORM_CAP_BYTES // 1024} KiB).",
    )
    toolName: str | None = Field(default=None, description="The tool involved, if any.")
    command: str | None = Field(default=None, description="The command involved, if any.")
    suggestedFix: str | None = Field(default=None, description="What would fix it, if you know.")

    @field_validator("context", "command", "suggestedFix")
    @classmethod
    def _capped(cls, value: Any, info: ValidationInfo) -> Any:
        return within_cap(value, info.field_name or "input")


def report_issue(args: ReportIssueInput, ctx: ToolContext) -> ToolOutput:
    issue = Issue(**args.model_dump(), sessionId=ctx.session_id, turnId=ctx.turn_id)
    ctx.issues.record(issue)  # fire-and-forget: never raises
    ctx.events.emit(
        IssueReported(
            sessionId=ctx.session_id,
            turnId=ctx.turn_id,
            issueKind=issue.kind,
            severity=issue.severity,
            summary=issue.summary,
        )
    )
    if issue.severity == "fatal":
        return ToolOutput(FATAL_REPLY, cursor=CursorChange(fatal_issue=True))
    return ToolOutput(
        f"Issue recorded (severity={issue.severity}). Continue with your work unless this is fatal."
    )


REPORT_ISSUE = Tool("report_issue", DESCRIPTION, ReportIssueInput, report_issue)
