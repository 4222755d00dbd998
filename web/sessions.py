"""Session routes (SPEC §3.3): dispatch, list, read, cancel, the steer journal."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Response, request

from daemon.bus import SteerBus
from daemon.events import EventSink, SessionQueued, ending_events
from daemon.ids import is_session_id
from daemon.records import SessionStatus, fold_journal
from daemon.registry import NewSession, SessionRegistry
from daemon.workflows import Catalog, WorkflowError
from daemon.workflows.engine import first_step
from web.errors import ApiError, invalid_request, json_response, session_not_found
from web.jobs import JobQueue
from web.models import parse_dispatch
from web.steer import json_body

log = logging.getLogger(__name__)

MAX_PAGE = 1000


def int_arg(name: str, default: int, low: int, high: int) -> int:
    """A non-negative integer query argument, at least `low`; values above `high` are capped."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12) or int(raw) < low:
        raise invalid_request(f"{name} must be an integer, at least {low}.")
    return min(int(raw), high)


def require_session_id(session_id: str) -> str:
    if not is_session_id(session_id):
        raise session_not_found()
    return session_id


@dataclass(frozen=True)
class SessionRoutes:
    bus: SteerBus
    registry: SessionRegistry
    jobs: JobQueue
    catalog: Catalog
    events: EventSink

    def dispatch(self) -> Response:
        """Register the session, its `session_queued` event and its RQ job in ONE MULTI/EXEC.

        One transaction: a worker can never see the job without the session (nor a session
        without its job), and `session_queued` is in the streams before anything the worker
        emits. The session is steerable as soon as this answers (no registration gap).
        """
        body = parse_dispatch(json_body())
        try:
            compiled = self.catalog.compiled(body.workflowId)
        except WorkflowError as exc:  # only in a catalog not made by load_catalog (which skips it)
            raise invalid_request(f"Workflow {body.workflowId[:200]!r} cannot run: {exc}") from None
        if compiled is None:
            raise invalid_request(f"Unknown workflowId {body.workflowId[:200]!r}.")
        first = first_step(compiled, body.goal, body.workspacePath, body.context)
        new = NewSession(
            workflowId=compiled.id,
            goal=body.goal,
            workspacePath=body.workspacePath,
            context=body.context,
            stepCount=compiled.step_count,
            firstStepId=first.step_id if first else None,
            firstStepTitle=first.title if first else None,
            gates=body.gates,
        )
        pipe = self.jobs.pipeline()
        session_id = self.registry.create(new, pipeline=pipe)
        queued = SessionQueued(sessionId=session_id, workflowId=compiled.id, goal=body.goal)
        lines = self.events.stage(pipe, [queued])
        self.jobs.enqueue(session_id, compiled.limits, pipe)
        pipe.execute()
        self.events.mirror(lines)
        data = {"sessionId": session_id, "status": SessionStatus.QUEUED.value, "workflowId": compiled.id}
        return json_response({"success": True, "data": data}, 202)

    def list_sessions(self) -> Response:
        raw_status = request.args.get("status") or None
        status: SessionStatus | None = None
        if raw_status is not None:
            try:
                status = SessionStatus(raw_status)
            except ValueError:
                valid = ", ".join(s.value for s in SessionStatus)
                raise invalid_request(f"status must be one of: {valid}.") from None
        limit = int_arg("limit", 100, 1, MAX_PAGE)
        offset = int_arg("offset", 0, 0, 10**9)
        records, total = self.registry.list_sessions(status, limit=limit, offset=offset)
        sessions = [record.model_dump(mode="json") for record in records]
        return json_response({"success": True, "data": {"sessions": sessions, "totalCount": total}})

    def get_session(self, session_id: str) -> Response:
        record = self.registry.get(require_session_id(session_id))
        if record is None:
            raise session_not_found()
        return json_response({"success": True, "data": record.model_dump(mode="json")})

    def cancel(self, session_id: str) -> Response:
        """202 when the cancel is recorded. A finished session answers 409 `session_finished`:
        it exists (GET still reads it) but there is nothing left to cancel."""
        outcome, undelivered = self.bus.cancel(require_session_id(session_id))
        if outcome == "not_found":
            raise session_not_found()
        if outcome == "finished":
            raise ApiError(409, "session_finished", "Session already finished; nothing to cancel.")
        if outcome == "cancelled":  # it was queued and no worker held it: it ended here and now
            self.registry.mark_finished(session_id)
            cancelled = SessionStatus.CANCELLED.value
            ending = ending_events(session_id, cancelled, "cancelled", "cancelled while queued", undelivered)
            self.events.emit(*ending)
            status = "cancelled"
        else:  # requested: the worker stops at its next turn boundary
            status = "cancel_requested"
        return json_response({"success": True, "data": {"sessionId": session_id, "status": status}}, 202)

    def steers(self, session_id: str) -> Response:
        journal = self.bus.journal(require_session_id(session_id))
        if journal is None:
            raise session_not_found()
        steers = [view.model_dump(mode="json") for view in fold_journal(journal)]
        return json_response({"success": True, "data": {"sessionId": session_id, "steers": steers}})
