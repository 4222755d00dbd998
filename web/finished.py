"""404 `session_finished`: a steer, an edit, a retract or a receipt for a session that ended.

README's HTTP API keeps 404 for a steer to a finished session; the body still says what happened, so
a person or a coordinating agent does not go looking for a typo in the id:
`{"success": false, "code": "session_finished", "error": "...", "status": "completed",
"outcome": "...", "outcomeDetail": ...}`. Only refusals come here (the hot path never reads
the record): one HMGET on the session's record tells a finished session from one that is
unknown or expired (404 `session_not_found`, as before).
"""

from __future__ import annotations

from daemon.bus.session.registry import record_fields
from daemon.bus.session.steerbus import SteerBus
from daemon.schema.records import FINISHED_STATUSES
from web.errors import ApiError, session_not_found

SESSION_FINISHED = "session_finished"


def finished_status(bus: SteerBus, session_id: str) -> tuple[str, str | None, str | None] | None:
    """(status, outcome, outcomeDetail) of a finished session; None for any other session."""
    status, outcome, detail = record_fields(
        bus.client, bus.keys, session_id, "status", "outcome", "outcomeDetail"
    )
    if status is None or status not in FINISHED_STATUSES:
        return None
    return status, outcome or None, detail or None


def session_finished(status: str, outcome: str | None, detail: str | None) -> ApiError:
    ended = f"The session has ended ({status}" + (f", outcome {outcome}" if outcome else "") + ")"
    return ApiError(
        404,
        SESSION_FINISHED,
        f"{ended}: it takes no more steers, edits or retracts.",
        {"status": status, "outcome": outcome, "outcomeDetail": detail},
    )


def gone(bus: SteerBus, session_id: str) -> ApiError:
    """The 404 for a session the bus refused: `session_finished` with its status, or
    `session_not_found`."""
    finished = finished_status(bus, session_id)
    return session_finished(*finished) if finished is not None else session_not_found()


def refuse_if_finished(bus: SteerBus, session_id: str, steer_state: str | None = None) -> None:
    """Raise 404 `session_finished` when the session has ended; with the `state` of the steer
    asked about, when there is one (an edit or retract of a steer a turn end took)."""
    finished = finished_status(bus, session_id)
    if finished is not None:
        error = session_finished(*finished)
        if steer_state is not None:
            error.extra["state"] = steer_state
        raise error
