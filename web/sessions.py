"""Session routes (SPEC §3.3): dispatch, list, read, cancel, the steer journal (paged)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

import redis
from flask import Response, request
from redis.client import Pipeline

from daemon.bus.events import EventSink, SessionQueued, ending_events
from daemon.bus.records import SessionStatus, fold_journal
from daemon.bus.registry import NewSession, SessionRegistry
from daemon.bus.steers import SteerBus
from daemon.host.ids import is_session_id
from daemon.workflows import Catalog, CompiledWorkflow, WorkflowError
from daemon.workflows.engine import first_step
from web.errors import ApiError, invalid_request, json_response, session_not_found, steer_bus_unavailable
from web.jobs import JobQueue
from web.models import (
    DispatchBody,
    SessionsQuery,
    SteersQuery,
    parse_dispatch,
    parse_dispatch_headers,
    parse_query,
)
from web.replies import GOAL_PREVIEW_CHARS, LIST_OMITS
from web.steer import json_body

log = logging.getLogger(__name__)

IDEMPOTENT_TRIES = 5  # WATCH conflicts happen only while another dispatch sets the same key


def body_digest(body: DispatchBody) -> str:
    """What makes two dispatches "the same body": the validated fields, key order aside."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


def dispatched(session_id: str, status: str, workflow_id: str, duplicate: bool = False) -> Response:
    """The 202 of dispatch (SPEC §3.3); a repeat of an Idempotency-Key says `duplicate`."""
    data: dict[str, object] = {"sessionId": session_id, "status": status, "workflowId": workflow_id}
    if duplicate:
        data["duplicate"] = True
    return json_response({"success": True, "data": data}, 202)


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
        With an `Idempotency-Key`, the key's record joins the same transaction (WATCHed, so
        two concurrent dispatches with one key create one session): a retry whose first
        answer was lost gets that session back, `"duplicate": true`.
        """
        headers = parse_dispatch_headers(request.headers)
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
        if headers.idempotency_key is None:
            pipe = self.jobs.pipeline()
            session_id = self._register(pipe, new, compiled)
            return dispatched(session_id, SessionStatus.QUEUED.value, compiled.id)
        return self._dispatch_once(headers.idempotency_key, body_digest(body), new, compiled)

    def _register(
        self,
        pipe: Pipeline,
        new: NewSession,
        workflow: CompiledWorkflow,
        idempotency: tuple[str, str] | None = None,
    ) -> str:
        """Queue the writes of one new session into `pipe` (in MULTI mode) and run them;
        `idempotency` is (key, body digest) of a dispatch with an Idempotency-Key."""
        session_id = self.registry.create(new, pipeline=pipe)
        queued = SessionQueued(sessionId=session_id, workflowId=workflow.id, goal=new.goal)
        lines = self.events.stage(pipe, [queued])
        self.jobs.enqueue(session_id, workflow.limits, pipe)
        if idempotency is not None:
            key, digest = idempotency
            first = json.dumps({"digest": digest, "sessionId": session_id})
            pipe.set(key, first, ex=self.bus.retention_seconds)
        pipe.execute()
        self.events.mirror(lines)
        return session_id

    def _dispatch_once(
        self, idempotency_key: str, digest: str, new: NewSession, workflow: CompiledWorkflow
    ) -> Response:
        key = self.bus.keys.dispatch_key(idempotency_key)
        for _ in range(IDEMPOTENT_TRIES):
            try:
                with self.jobs.watching(key) as pipe:
                    raw = pipe.get(key)
                    if raw is not None:
                        return self._repeat(json.loads(raw), digest, workflow.id)
                    pipe.multi()
                    session_id = self._register(pipe, new, workflow, (key, digest))
                    return dispatched(session_id, SessionStatus.QUEUED.value, workflow.id)
            except redis.WatchError as exc:
                # The key changed under the WATCH (a concurrent dispatch with it won: the next
                # try answers its session), or the connection broke while watching (redis-py
                # reports that as a WatchError too; nothing was written). Either way: again.
                log.info("dispatch with Idempotency-Key %s: %s; trying again", idempotency_key, exc)
        raise steer_bus_unavailable(RuntimeError("the Idempotency-Key stayed contended"))

    def _repeat(self, first: dict[str, str], digest: str, workflow_id: str) -> Response:
        """The answer to a dispatch whose key was seen: the first session, or 422."""
        if first.get("digest") != digest:
            raise ApiError(
                422,
                "idempotency_key_reuse",
                "This Idempotency-Key was used before with a different request body.",
            )
        session_id = first["sessionId"]
        record = self.registry.get(session_id)
        status = record.status.value if record else SessionStatus.QUEUED.value
        return dispatched(session_id, status, workflow_id, duplicate=True)

    def list_sessions(self) -> Response:
        query = parse_query(SessionsQuery, request.args)
        records, total = self.registry.list_sessions(query.status, limit=query.limit, offset=query.offset)
        sessions = [
            {
                **record.model_dump(mode="json", exclude=set(LIST_OMITS)),
                "goalPreview": record.goal[:GOAL_PREVIEW_CHARS],
            }
            for record in records
        ]
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
            self.registry.mark_finished(session_id, self.bus.retention_seconds)
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
