"""An issue an agent reports (`report_issue`; README's Coding sessions), as recorded and served."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.host.clock import utc_now_iso

IssueKind = Literal["tool_failure", "blocked", "unexpected_behavior", "needs_human", "self_correction"]
Severity = Literal["info", "warn", "error", "fatal"]


class Issue(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: IssueKind
    severity: Severity
    summary: str = Field(max_length=200)
    context: str | dict[str, Any] | None = None
    toolName: str | None = None
    command: str | None = None
    suggestedFix: str | None = None
    ts: str = Field(default_factory=utc_now_iso)
    sessionId: str
    turnId: int
