"""Session routes (SPEC §3.3): dispatch, list, read, cancel, the steer journal (paged)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Response, request

from daemon.bus import SteerBus
from daemon.events import EventSink, SessionQueued, ending_events
from daemon.ids import is_session_id
from daemon.records import SessionStatus, fold_journal
from daemon.registry import NewSession, SessionRegistry
from daemon.workflows import Catalog
from web.errors import ApiError, invalid_request, json_response, session_not_found
from web.jobs import JobQueue
from web.models import SessionsQuery, SteersQuery, parse_dispatch, parse_query
from web.replies import LIST_OMITS
from web.steer import json_body

log = logging.getLogger(__name__)


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
        workflow = self.catalog.get(body.workflowId)
        if workflow is None:
            raise invalid_request(f"Unknown workflowId {body.workflowId[:200]!r}.")
        new = NewSession(
            workflowId=workflow.id,
            goal=body.goal,
            workspacePath=body.workspacePath,
            context=body.context,
            stepCount=len(workflow.steps),
            firstStepId=workflow.steps[0].id,
        )
        pipe = self.jobs.pipeline()
        session_id = self.registry.create(new, pipeline=pipe)
        queued = SessionQueued(sessionId=session_id, workflowId=workflow.id, goal=body.goal)
        lines = self.events.stage(pipe, [queued])
        self.jobs.enqueue(session_id, workflow.limits, pipe)
        pipe.execute()
        self.events.mirror(lines)
        data = {"sessionId": session_id, "status": SessionStatus.QUEUED.value, "workflowId": workflow.id}
        return json_response({"success": True, "data": data}, 202)

    def list_sessions(self) -> Response:
        query = parse_query(SessionsQuery, request.args)
        records, total = self.registry.list_sessions(query.status, limit=query.limit, offset=query.offset)
        sessions = [record.model_dump(mode="json", exclude=set(LIST_OMITS)) for record in records]
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
        """A page of the journal: steers with an offset above `since`, at most `limit`."""
        query = parse_query(SteersQuery, request.args)
        journal = self.bus.journal(require_session_id(session_id))
        if journal is None:
            raise session_not_found()
        page = [view for view in fold_journal(journal) if view.offset > query.since][: query.limit]
        data = {
            "sessionId": session_id,
            "steers": [view.model_dump(mode="json") for view in page],
            "next": page[-1].offset if page else query.since,
        }
        return json_response({"success": True, "data": data})
