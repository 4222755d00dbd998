"""Session routes (README's HTTP API): dispatch, list, read, cancel, the steer journal (paged)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field

from flask import Response, request

from daemon.agent.prices import unknown_model
from daemon.bus.session.conversation import read_conversation
from daemon.bus.session.dispatch import (
    AgentConfigRefused,
    DispatchContended,
    Dispatcher,
    IdempotencyKeyReuse,
    SessionRequest,
    UnknownWorkflow,
    WorkflowUnrunnable,
    prepare,
)
from daemon.bus.session.forks import fork_summaries
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.signals import SignalStream
from daemon.bus.session.spawns import SessionTree, cancel_descendants, cancel_session
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.receiveraddresses import HOW_TO_ALLOW, ReceiverPolicy, url_refusal
from daemon.schema.records import fold_journal
from daemon.workflows import Catalog
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
from web.replies import GOAL_PREVIEW_CHARS, LIST_OMITS, SessionDetail
from web.requestbasics import json_body, require_session_id
from web.suggest import unknown_workflow
from web.workspaces import WorkspacePolicy, check_repository

log = logging.getLogger(__name__)
MATCHES = 10  # the sessions a shortened id may match: more than one is already ambiguous


def body_digest(body: DispatchBody) -> str:
    """What makes two dispatches "the same body": the validated fields, key order aside."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


def dispatched(
    session_id: str, status: str, workflow_id: str, duplicate: bool = False, model: str | None = None
) -> Response:
    """The 202 of dispatch (README's HTTP API); a repeat of an Idempotency-Key says `duplicate`;
    a model the price table does not know is named in `warnings` (not a silent "cost unknown")."""
    data: dict[str, object] = {"sessionId": session_id, "status": status, "workflowId": workflow_id}
    if duplicate:
        data["duplicate"] = True
    if why := unknown_model(model):
        data["warnings"] = [{"code": "unknown_model", "message": why}]
    return json_response({"success": True, "data": data}, 202)


@dataclass(frozen=True)
class SessionRoutes:
    bus: SteerBus
    registry: SessionRegistry
    jobs: JobQueue
    catalog: Catalog
    events: EventSink
    workspaces: WorkspacePolicy | None = None  # None: any absolute path (tests of other rules)
    # the callbackUrl addresses allowed (default: public ones only)
    receivers: ReceiverPolicy = field(default_factory=ReceiverPolicy)

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
        if self.workspaces is not None:
            self.workspaces.check(body.workspacePath)
        check_repository(body.workspacePath, body.branchStrategy)
        self.check_callback(body.callbackUrl)
        try:
            new, limits = prepare(self.catalog, SessionRequest.model_validate(body.model_dump()))
        except WorkflowUnrunnable as exc:
            raise invalid_request(f"Workflow {body.workflowId[:200]!r} cannot run: {exc}") from None
        except UnknownWorkflow:
            raise unknown_workflow(body.workflowId, self.catalog.workflows) from None
        except AgentConfigRefused as why:
            raise invalid_request(f"agentConfig: {why}") from None
        key = headers.idempotency_key
        idempotency = None if key is None else (key, body_digest(body))
        try:
            done = self.dispatcher.dispatch(new, limits, idempotency)
        except IdempotencyKeyReuse:
            raise ApiError(
                422,
                "idempotency_key_reuse",
                "This Idempotency-Key was used before with a different request body.",
            ) from None
        except DispatchContended:
            raise steer_bus_unavailable(RuntimeError("the Idempotency-Key stayed contended")) from None
        model = new.agentConfig.model if new.agentConfig is not None else None
        return dispatched(done.session_id, done.status, new.workflowId, done.duplicate, model)

    def check_callback(self, url: str | None) -> None:
        """400 `callback_not_allowed` for a receiver whose literal address (or `localhost`) the
        operator has not allowed: a courtesy, the sender checks every address it connects to
        (daemon/host/receiveraddresses.py)."""
        why = None if url is None else url_refusal(url, self.receivers)
        if why is not None:
            message = f"callbackUrl is not allowed: {why} ({HOW_TO_ALLOW})."
            raise ApiError(400, "callback_not_allowed", message)

    @property
    def dispatcher(self) -> Dispatcher:
        """daemon/bus/session/dispatch.py: the one path of a new session, the worker's spawn_agent's too."""
        return Dispatcher(self.jobs, self.bus.keys, self.registry, self.events, self.bus.retention_seconds)

    def list_sessions(self) -> Response:
        query = parse_query(SessionsQuery, request.args)
        if query.id is not None:  # a shortened id taken back (README's worktrain command)
            found = [
                r for r in self.registry.get_many(self.registry.ids_matching(query.id, MATCHES))
                if query.status in (None, r.status)
            ]  # fmt: skip
            records, total = found[query.offset : query.offset + query.limit], len(found)
        elif (
            query.parent is not None
        ):  # README's Sub-agents and questions: the children one session spawned, newest first
            children = list(reversed(self.tree.children(query.parent)))
            found = [r for r in self.registry.get_many(children) if query.status in (None, r.status)]
            records, total = found[query.offset : query.offset + query.limit], len(found)
        else:
            records, total = self.registry.list_sessions(query.status, limit=query.limit, offset=query.offset)
        sessions = [
            {
                **record.model_dump(mode="json", exclude=set(LIST_OMITS)),
                "goalPreview": record.goal[:GOAL_PREVIEW_CHARS],
            }
            for record in records
        ]
        return json_response({"success": True, "data": {"sessions": sessions, "totalCount": total}})

    @property
    def tree(self) -> SessionTree:
        return SessionTree(self.bus.client, self.bus.keys)

    def get_session(self, session_id: str) -> Response:
        record = self.registry.get(require_session_id(session_id))
        if record is None:
            raise session_not_found()
        question = None
        if record.waitingFor == "reply":
            question = SignalStream(self.bus.client, self.bus.keys).last_question(session_id)
        detail = SessionDetail(
            **record.model_dump(),
            children=self.tree.summaries(session_id),
            forks=fork_summaries(self.bus.client, self.registry, session_id),
            pendingQuestion=question,
        )
        return json_response({"success": True, "data": detail.model_dump(mode="json")})

    def cancel(self, session_id: str) -> Response:
        """202 when the cancel is recorded. A finished session answers 409 `session_finished`:
        it exists (GET still reads it) but there is nothing left to cancel. A cancel cascades
        to every session below this one (README's Sub-agents and questions)."""
        outcome = cancel_session(self.bus, self.registry, self.events, require_session_id(session_id))
        if outcome == "not_found":
            raise session_not_found()
        if outcome == "finished":  # say how it ended, as a steer's refusal does (issue 33)
            record = self.registry.get(session_id)
            status, ended = (record.status, record.outcome) if record is not None else ("finished", None)
            said = f"The session has already ended ({status}" + (f", outcome {ended}" if ended else "") + ")"
            raise ApiError(
                409,
                "session_finished",
                f"{said}: nothing to cancel.",
                {
                    "status": status,
                    "outcome": ended,
                    "outcomeDetail": record.outcomeDetail if record else None,
                },
            )
        cancel_descendants(self.bus, self.registry, self.events, self.tree, session_id)
        # cancelled: it was queued and no worker held it, it ended here and now; requested:
        # the worker cuts the live turn short within seconds (its next lease beat)
        status = "cancelled" if outcome == "cancelled" else "cancel_requested"
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

    def conversation(self, session_id: str) -> Response:
        """The checkpointed conversation (the console's turn-by-turn view, README's Console)."""
        if self.registry.get(require_session_id(session_id)) is None:
            raise session_not_found()
        messages = read_conversation(self.bus.client, self.bus.keys, session_id)
        data = {
            "sessionId": session_id,
            # every message says its turn, null included (README's Console: one turn numbering)
            "messages": [
                {**m.model_dump(mode="json", exclude_none=True), "turnId": m.turnId} for m in messages
            ],
        }
        return json_response({"success": True, "data": data})
