"""Trigger routes (README's Triggers): the providers' webhooks, and what each trigger did.

- `POST /api/v2/triggers/<id>`: GitHub's, GitLab's or a generic sender's request as it
  sends it, authenticated by the provider's scheme (not the bearer token: web/app.py lets
  it past the guard): 401 `bad_signature`, 404 `trigger_not_found`, 400 for a body that is
  not the provider's JSON, 202 with what the event did (daemon/triggers/firing.py);
- `GET /api/v2/triggers` and `GET /api/v2/triggers/<id>` (its state and its newest fires).
Secrets are never in an answer: only the names of the variables that hold them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from flask import Response, current_app, request
from pydantic import BaseModel, Field, RootModel

from daemon.bus.fleet.triggers import FireRecord, TriggerState, TriggerStore
from daemon.host.ids import TRIGGER_ID_RE, is_trigger_id
from daemon.triggers.events import BadPayload
from daemon.triggers.firing import Firing
from daemon.triggers.loading import Trigger, TriggerSet
from daemon.triggers.providers import provider
from daemon.triggers.spec import TriggerFilter
from web.errors import ApiError, invalid_request, json_response, request_timeout
from web.models import Query, parse_query
from web.replies import Reply
from web.requestbasics import read_capped, unsupported_media

FORM = "application/x-www-form-urlencoded"  # GitHub's other hook content type (JSON in `payload`)


class TriggerView(BaseModel):
    """One trigger as the file declares it (secrets: only their variables' names) and its state."""

    id: str = Field(pattern=TRIGGER_ID_RE.pattern)
    source: Literal["github", "gitlab", "generic"]
    mode: Literal["webhook", "poll"]
    events: list[str]
    filter: TriggerFilter | None = None
    repo: str | None = None
    apiUrl: str | None = None
    interval: int | None = Field(default=None, description="poll: seconds between polls.")
    workflowId: str
    whileRunning: Literal["steer", "queue", "ignore"]
    reportBack: Literal["comment", "none"]
    secretEnv: str | None = None
    tokenEnv: str | None = None
    line: int = Field(description="Its line in the triggers file.")
    state: TriggerState


class TriggerDetail(TriggerView):
    fires: list[FireRecord] = Field(description="The newest fires first: each event, its key and session.")


class TriggersData(Reply):
    file: str | None = Field(description="The triggers file read at start (null: none).")
    triggers: list[TriggerView]


class TriggersReply(Reply):
    success: Literal[True]
    data: TriggersData


class TriggerReply(Reply):
    success: Literal[True]
    data: TriggerDetail


class Steered(Reply):
    sessionId: str
    offset: int | None


class Queued(Reply):
    sessionId: str | None = Field(description="The live session it waits behind.")
    key: str | None


class TriggerFired(Reply):
    """What a provider's webhook did (202)."""

    success: Literal[True]
    triggerId: str
    event: str | None = None
    deliveryId: str | None = None
    sessionId: str | None = Field(
        default=None, description="The session it started (or, duplicate, the first's)."
    )
    steered: Steered | None = None
    queued: Queued | None = None
    ignored: str | None = Field(default=None, description="Why the event started nothing.")
    duplicate: Literal[True] | None = Field(default=None, description="A redelivery: nothing was done again.")


class WebhookBody(RootModel[dict[str, Any]]):
    """A provider's webhook body: its JSON object as it sends it (GitHub may also send it
    form-encoded, the JSON in `payload`)."""


class FiresQuery(Query):
    """`GET /api/v2/triggers/<id>`."""

    limit: int = Field(default=50, ge=1, le=1000, description="How many of the newest fires.")


def trigger_not_found() -> ApiError:
    return ApiError(404, "trigger_not_found", "No webhook trigger with that id in the triggers file.")


def bad_signature() -> ApiError:
    return ApiError(401, "bad_signature", "The request's signature does not match the trigger's secret.")


def view_of(trigger: Trigger, state: TriggerState) -> TriggerView:
    spec = trigger.spec
    return TriggerView(
        id=spec.id, source=spec.source, mode=spec.mode, events=spec.events, filter=spec.filter,
        repo=spec.repo, apiUrl=spec.api_url or None, interval=spec.interval if spec.mode == "poll" else None,
        workflowId=spec.workflowId, whileRunning=spec.whileRunning, reportBack=spec.reportBack,
        secretEnv=spec.secretEnv, tokenEnv=spec.tokenEnv, line=trigger.line, state=state,
    )  # fmt: skip


def fired_body(fire: FireRecord) -> dict[str, Any]:
    """The 202's body: what the event did (a redelivery: what it did the first time, and
    `duplicate`)."""
    body: dict[str, Any] = {"success": True, "triggerId": fire.triggerId, "event": fire.event}
    body["deliveryId"] = fire.deliveryId
    did = fire.result
    if did == "duplicate":
        body["duplicate"] = True
        did = fire.firstResult or "started"
    if did == "started" and fire.sessionId is not None:
        body["sessionId"] = fire.sessionId
    elif did == "steered":
        body["steered"] = {"sessionId": fire.sessionId, "offset": fire.offset}
    elif did == "queued":
        body["queued"] = {"sessionId": fire.sessionId, "key": fire.key}
    elif did == "ignored":
        body["ignored"] = fire.reason or "ignored"
    return TriggerFired.model_validate(body).model_dump(mode="json", exclude_none=True)


@dataclass
class TriggerRoutes:
    triggers: TriggerSet
    store: TriggerStore
    firing: Firing
    secret: Callable[[str], str | None]

    def list_triggers(self) -> Response:
        states = self.store.states([t.id for t in self.triggers])
        views = [view_of(t, states[t.id]).model_dump(mode="json", exclude_none=True) for t in self.triggers]
        file = str(self.triggers.path) if self.triggers.path is not None and len(self.triggers) else None
        return json_response({"success": True, "data": {"file": file, "triggers": views}})

    def one(self, trigger_id: str) -> Response:
        trigger = self.triggers.get(trigger_id) if is_trigger_id(trigger_id) else None
        if trigger is None:
            raise ApiError(404, "trigger_not_found", "No trigger with that id in the triggers file.")
        query = parse_query(FiresQuery, request.args)
        view = view_of(trigger, self.store.state(trigger.id))
        detail = TriggerDetail(**view.model_dump(), fires=self.store.fires(trigger.id, query.limit))
        return json_response({"success": True, "data": detail.model_dump(mode="json", exclude_none=True)})

    def webhook(self, trigger_id: str) -> Response:
        trigger = self.triggers.get(trigger_id) if is_trigger_id(trigger_id) else None
        if trigger is None or trigger.spec.mode != "webhook":
            raise trigger_not_found()
        body = _raw_body()
        headers = {name.lower(): value for name, value in request.headers.items()}
        source = provider(trigger.spec.source)
        secret = self.secret(trigger.spec.secretEnv) if trigger.spec.secretEnv else None
        if not secret or not source.verify(secret, headers, body):
            raise bad_signature()
        if trigger.spec.source == "github" and headers.get("x-github-event") == "ping":
            ping = {"success": True, "triggerId": trigger.id, "event": "ping", "ignored": "ping"}
            return json_response(ping, 202)
        try:
            event = source.webhook_event(headers, body)
        except BadPayload as exc:
            raise invalid_request(f"Not a {trigger.spec.source} webhook: {exc}.") from None
        fired = self.firing.fire(trigger, event)
        if fired.result == "error":
            raise ApiError(422, "trigger_error", fired.error or "The event could not be placed.")
        return json_response(fired_body(fired), 202)


def _raw_body() -> bytes:
    """The body as sent (its signature covers these bytes): JSON, or GitHub's form encoding."""
    mimetype = (request.mimetype or "").lower()
    if not (request.is_json or mimetype == FORM):
        raise unsupported_media()
    try:
        if request.content_length is None:  # chunked: Werkzeug would cut it at the limit silently
            return read_capped(request.environ["wsgi.input"], current_app.config["MAX_CONTENT_LENGTH"])
        return request.get_data(cache=False)
    except TimeoutError:  # gunicorn's socket timeout (web/deadlines.py)
        raise request_timeout() from None
