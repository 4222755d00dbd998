"""How an attempt at a session ends: the loop's answer, and what the runner finishes it with."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.schema.records import SessionStatus
from daemon.tools import WorkflowCursor


@dataclass(frozen=True)
class Ending:
    """How an attempt ended. `status` None: the worker is stopping and hands the session over."""

    status: SessionStatus | None
    outcome: str
    detail: str = ""


RELEASED = Ending(None, "released", "the worker is stopping; the session will resume elsewhere")
CANCELLED = Ending(SessionStatus.CANCELLED, "cancelled", "cancelled by the coordinator")


def finished(cursor: WorkflowCursor) -> Ending:
    """The ending of a workflow the agent completed (or ended with a fatal issue)."""
    if cursor.ended_fatal:
        return Ending(SessionStatus.FAILED, "fatal_issue", "the agent reported a fatal issue")
    return Ending(SessionStatus.COMPLETED, "workflow_complete", "all steps completed")
