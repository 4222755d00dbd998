"""The fork route (README's "Fork a session", SPEC 3.12): `POST /api/v2/sessions/<id>/fork`.

Thin: the request's checks (body, header, the steer's size), then daemon/forking/'s Forker,
whose refusals are the API's errors as they are (status, code, sentence)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from flask import Response, request

from daemon.bus.session.dispatch import DispatchContended, Dispatcher, IdempotencyKeyReuse
from daemon.bus.session.forks import ForkStore
from daemon.forking.fork import Forked, Forker, ForkRefused, ForkRequest
from daemon.host.config import Settings
from daemon.schema.records import SessionStatus
from daemon.workflows import Catalog
from web.errors import ApiError, json_response, steer_bus_unavailable
from web.models import ForkBody, parse_dispatch_headers, parse_fork
from web.replies import ForkData
from web.requestbasics import json_body, require_session_id
from web.steerchecks import SteerLimits

SHARED_NOTE = (
    "The source is not a worktree session: its conversation was forked, not its files. The fork works "
    "in the same workspace, as it is now."
)


def fork_digest(source: str, body: ForkBody) -> str:
    """What makes two fork requests the same (their Idempotency-Key): the source and the body."""
    canonical = json.dumps(
        {"fork": source, **body.model_dump(mode="json")}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class ForkRoutes:
    forker: Forker
    limits: SteerLimits

    @classmethod
    def of(cls, store: ForkStore, dispatcher: Dispatcher, catalog: Catalog, settings: Settings) -> ForkRoutes:
        return cls(Forker(store, dispatcher, catalog), SteerLimits.of(settings))

    def fork(self, session_id: str) -> Response:
        source = require_session_id(session_id)
        headers = parse_dispatch_headers(request.headers)
        body = parse_fork(json_body())
        if body.steer is not None:
            self.limits.check_text(body.steer)
        key = headers.idempotency_key
        asked = ForkRequest(
            source=source,
            turn=body.turn,
            steer=body.steer,
            agent=body.agentConfig,
            goal=body.goal,
            idempotency=None if key is None else (key, fork_digest(source, body)),
        )
        try:
            forked = self.forker.fork(asked)
        except ForkRefused as refused:
            raise ApiError(refused.status, refused.code, refused.message) from None
        except IdempotencyKeyReuse:
            raise ApiError(
                422, "idempotency_key_reuse", "This Idempotency-Key was used before with a different request."
            ) from None
        except DispatchContended:
            raise steer_bus_unavailable(RuntimeError("the Idempotency-Key stayed contended")) from None
        data = answer(forked)
        unset = {name for name in ("note", "duplicate") if getattr(data, name) is None}
        return json_response({"success": True, "data": data.model_dump(mode="json", exclude=unset)}, 202)


def answer(forked: Forked) -> ForkData:
    return ForkData(
        sessionId=forked.session_id,
        status=SessionStatus(forked.status),
        workflowId=forked.workflow_id,
        forkOf=forked.fork_of,
        conversationOnly=forked.conversation_only,
        note=SHARED_NOTE if forked.conversation_only else None,
        duplicate=True if forked.duplicate else None,
    )
