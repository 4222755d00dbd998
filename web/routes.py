"""The route table: every HTTP route of the API, once (method, path, request models, replies,
headers). `web.app.create_app` registers each one with its view; `web.openapi` turns the
same table into `GET /api/v2/openapi.json`. A new route is one `Route` here plus its view
in `create_app`'s `views` (docs/DEVELOPING.md, "Adding a route").

Paths are Flask rules (`<session_id>`, `<int:offset>`). The generator adds the replies that
every route of a kind shares, so they are not repeated here: under `/api/v2` (`api=True`)
401 `unauthorized` (with a token), 403 `forbidden_host` (without one) and 503 (Redis down,
or a standalone console); with a query string or a body 400 `invalid_request`; with a body
413 and 415. In standalone mode a route whose view needs Redis answers 503.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from daemon.host.ids import IDEMPOTENCY_KEY_RE
from daemon.schema.events import Event
from web import replies
from web.fleet import FleetHistoryReply, FleetReply, WorkersReply
from web.models import (
    DispatchBody,
    EditBody,
    FleetHistoryQuery,
    ForkBody,
    Query,
    SessionsQuery,
    SignalsQuery,
    SteerBody,
    SteerQuery,
    SteersQuery,
    StreamQuery,
    WebhooksQuery,
)
from web.triggers import FiresQuery, TriggerFired, TriggerReply, TriggersReply, WebhookBody

API = "/api/v2"


@dataclass(frozen=True)
class Reply:
    description: str
    model: type[BaseModel] | None = replies.ErrorReply  # the JSON body; None: not JSON
    media: str = "application/json"
    headers: tuple[str, ...] = ()  # response headers the reply carries (Retry-After, ...)
    events: Any = None  # text/event-stream: the type of each message's JSON `data` ...
    events_name: str = "Event"  # ... and its name in the document


@dataclass(frozen=True)
class Header:
    """A request header a route reads (not Authorization: that is the security scheme)."""

    name: str
    description: str
    pattern: str | None = None


@dataclass(frozen=True)
class Route:
    name: str  # the Flask endpoint, and the operationId
    method: str
    rule: str  # a Flask rule; under API when `api`
    summary: str
    replies: Mapping[int, Reply]
    body: type[BaseModel] | None = None
    query: type[Query] | None = None
    headers: tuple[Header, ...] = ()
    api: bool = True
    tags: tuple[str, ...] = field(default=())
    # "bearer": behind web.auth's guard; "signature": a provider's webhook, authenticated by
    # its own signature scheme instead (README's Triggers), the guard does not apply
    auth: str = "bearer"

    @property
    def path(self) -> str:
        return f"{API}{self.rule}" if self.api else self.rule


SESSION_NOT_FOUND = Reply("Unknown, expired or malformed session id (`session_not_found`).")
RETRY = ("Retry-After",)
STEER_NOT_FOUND = Reply(
    "`session_not_found`, or `steer_not_found` (no steer at that offset), or `session_finished`"
    " (with `status`, `outcome`) when the session has ended and the steer is gone or taken."
)
SESSION_FINISHED = Reply(
    "`session_not_found`, or `session_finished` (with `status`, `outcome`, `outcomeDetail`): the"
    " session has ended."
)
WAITS_FULL = Reply("`too_many_waits`: this process holds its bound of receipt waits.", headers=RETRY)

ROUTES: tuple[Route, ...] = (
    Route(
        "steer", "POST", "/sessions/<session_id>/steer", "Steer a session (README's HTTP API).",
        body=SteerBody,
        replies={
            200: Reply("Accepted, or a duplicate of an accepted steer.", replies.SteerReply),
            404: SESSION_FINISHED,
            409: Reply("`no_live_turn` or `stale_turn` (with expectedTurnId, currentTurnId)."),
            413: Reply("`steer_too_large` (text over WORKTRAIN_MAX_STEER_BYTES) or `payload_too_large`."),
            422: Reply("`client_msg_id_reuse`: the clientMsgId was used with another text."),
            429: Reply("`too_many_pending_steers`: WORKTRAIN_MAX_PENDING_STEERS wait.", headers=RETRY),
            503: Reply("`steer_bus_unavailable` (Redis) or `no_steer_channel` (standalone)."),
        },
        tags=("sessions",),
    ),
    Route(
        "dispatch", "POST", "/auto/dispatch", "Start a session (README's HTTP API).",
        body=DispatchBody,
        headers=(
            Header(
                "Idempotency-Key",
                "Makes a retry safe: a repeat with the same key and body answers the first session.",
                IDEMPOTENCY_KEY_RE.pattern,
            ),
        ),
        replies={
            202: Reply("The session is registered and queued (or, for a repeated key, was).",
                       replies.DispatchReply),
            422: Reply("`idempotency_key_reuse`: the Idempotency-Key was used with another body."),
            400: Reply("`invalid_request`, or `workspace_not_allowed`: `/`, what WorkTrain runs "
                       "from (its data dir, code, runtime folder, Python) or a folder holding it, or "
                       "outside WORKTRAIN_WORKSPACE_ROOTS, or `workspace_not_a_repository`: "
                       "branchStrategy worktree on a folder of this host in no git repository, or "
                       "`repository_config_refused`: its git config has keys outside the allowlist "
                       "(named) that WorkTrain's own git does not run with, or "
                       "`callback_not_allowed`: a callbackUrl on loopback, a private or another "
                       "non-public address the operator has not allowed."),
        },
        tags=("sessions",),
    ),
    Route(
        "sessions", "GET", "/sessions", "Sessions, newest first (without goal and context).",
        query=SessionsQuery,
        replies={200: Reply("A page of sessions.", replies.SessionsReply)},
        tags=("sessions",),
    ),
    Route(
        "session", "GET", "/sessions/<session_id>", "One session's record.",
        replies={200: Reply("The record, with its children and any question it waits on.",
                            replies.SessionDetailReply), 404: SESSION_NOT_FOUND},
        tags=("sessions",),
    ),
    Route(
        "conversation", "GET", "/sessions/<session_id>/conversation",
        "The session's conversation: its checkpointed messages, turn by turn.",
        replies={200: Reply("The messages, oldest first.", replies.ConversationReply),
                 404: SESSION_NOT_FOUND},
        tags=("sessions",),
    ),
    Route(
        "fork", "POST", "/sessions/<session_id>/fork",
        "Fork a session from one of its turns (README's Fork a session): its history through that turn, "
        "its workflow position after it, its worktree as it was then.",
        body=ForkBody,
        headers=(
            Header(
                "Idempotency-Key",
                "Makes a retry safe: a repeat with the same key and body answers the first fork.",
                IDEMPOTENCY_KEY_RE.pattern,
            ),
        ),
        replies={
            202: Reply("The fork is registered and queued (or, for a repeated key, was).", replies.ForkReply),
            400: Reply("`invalid_request`, or `unknown_turn`: a turn the source never ended (not yet, or "
                       "cut short before its reply)."),
            404: SESSION_NOT_FOUND,
            409: Reply("`journal_gone` (the source keeps no journal of that turn: expired, or from before "
                       "forks), `turn_compacted`, `snapshot_gone` (no worktree snapshot of that turn is "
                       "kept), `workflow_gone`."),
            413: Reply("`steer_too_large` (steer over WORKTRAIN_MAX_STEER_BYTES) or `payload_too_large`."),
            422: Reply("`idempotency_key_reuse`: the Idempotency-Key was used with another request."),
        },
        tags=("sessions",),
    ),
    Route(
        "cancel", "POST", "/sessions/<session_id>/cancel", "Cancel a session.",
        replies={
            202: Reply("Cancelled (queued) or cancel requested (running).", replies.CancelReply),
            404: SESSION_NOT_FOUND,
            409: Reply("`session_finished`: nothing left to cancel."),
        },
        tags=("sessions",),
    ),
    Route(
        "steers", "GET", "/sessions/<session_id>/steers",
        "The steer journal, a page of steers by offset; with `clientMsgId`, that one steer (README's "
        "Managing steers).",
        query=SteersQuery,
        replies={
            200: Reply("Steers with their delivery state, or the one steer.", replies.SteersAnswer),
            404: Reply("`session_not_found`, or `steer_not_found` for a clientMsgId never accepted."),
            503: WAITS_FULL,
        },
        tags=("steers",),
    ),
    Route(
        "steer_one", "GET", "/sessions/<session_id>/steers/<int:offset>",
        "One steer; with `wait`, a receipt that answers once it is no longer pending (README's Managing "
        "steers).",
        query=SteerQuery,
        replies={
            200: Reply("The steer, folded from the journal.", replies.OneSteerReply),
            404: STEER_NOT_FOUND,
            503: WAITS_FULL,
        },
        tags=("steers",),
    ),
    Route(
        "steer_retract", "DELETE", "/sessions/<session_id>/steers/<int:offset>",
        "Retract a pending steer, atomically with the drain (README's Managing steers).",
        replies={
            200: Reply("Retracted (again on a retry).", replies.SteerChangeReply),
            404: STEER_NOT_FOUND,
            409: Reply("`steer_taken` (with `state`): a turn end already took it."),
        },
        tags=("steers",),
    ),
    Route(
        "steer_edit", "PATCH", "/sessions/<session_id>/steers/<int:offset>",
        "Edit a pending steer in place: same offset, same place (README's Managing steers).",
        body=EditBody,
        replies={
            200: Reply("Edited.", replies.SteerChangeReply),
            404: STEER_NOT_FOUND,
            409: Reply("`steer_taken` (with `state`), `steer_retracted`, or `too_many_edits` "
                       "(WORKTRAIN_MAX_STEER_EDITS reached)."),
            413: Reply("`steer_too_large` (text over WORKTRAIN_MAX_STEER_BYTES) or `payload_too_large`."),
        },
        tags=("steers",),
    ),
    Route(
        "session_events", "GET", "/sessions/<session_id>/events",
        "The session's events as Server-Sent Events, ending after session_completed.",
        headers=(Header("Last-Event-ID", "Resume after this event id.", r"^[0-9]{1,20}(-[0-9]{1,20})?$"),),
        replies={
            200: Reply("One message per event: `id` its stream id, `event` its kind.", None,
                       "text/event-stream", events=Event),
            404: SESSION_NOT_FOUND,
            503: Reply("Redis unavailable, or too many open streams (`too_many_streams`).", headers=RETRY),
        },
        tags=("streams",),
    ),
    Route(
        "events", "GET", "/events",
        "A page of the event stream (with `Accept: text/event-stream`: the events live, as SSE).",
        query=StreamQuery,
        replies={200: Reply("Events after `since`.", replies.EventsReply)},
        tags=("streams",),
    ),
    Route(
        "issues", "GET", "/issues", "A page of the issue stream.",
        query=StreamQuery,
        replies={200: Reply("Issues after `since`.", replies.IssuesReply)},
        tags=("streams",),
    ),
    Route(
        "session_signals", "GET", "/sessions/<session_id>/signals",
        "The session's coordinator signals; with `wait`, a long poll for the next one (README's "
        "Sub-agents and questions).",
        query=SignalsQuery,
        replies={
            200: Reply("Signals after `since` (empty when `wait` passed without one).", replies.SignalsReply),
            404: SESSION_NOT_FOUND,
            503: Reply("`too_many_waits`: this process holds its bound of signal waits.", headers=RETRY),
        },
        tags=("signals",),
    ),
    Route(
        "signals", "GET", "/signals", "A page of every session's coordinator signals (README's "
        "Sub-agents and questions).",
        query=StreamQuery,
        replies={200: Reply("Signals after `since`.", replies.GlobalSignalsReply)},
        tags=("signals",),
    ),
    Route(
        "session_webhooks", "GET", "/sessions/<session_id>/webhooks",
        "The session's webhook deliveries, in the order they were queued (README's Webhooks).",
        replies={200: Reply("Its deliveries.", replies.SessionWebhooksReply), 404: SESSION_NOT_FOUND},
        tags=("webhooks",),
    ),
    Route(
        "webhooks", "GET", "/webhooks", "The newest webhook deliveries of the fleet (README's Webhooks).",
        query=WebhooksQuery,
        replies={200: Reply("Deliveries, newest first.", replies.WebhooksReply)},
        tags=("webhooks",),
    ),
    Route(
        "triggers", "GET", "/triggers",
        "Every trigger of the triggers file with its state: last fire, last poll, cursor, last error, "
        "sessions started (README's Triggers).",
        replies={200: Reply("The triggers, in the file's order.", TriggersReply)},
        tags=("triggers",),
    ),
    Route(
        "trigger", "GET", "/triggers/<trigger_id>", "One trigger, its state and its newest fires.",
        query=FiresQuery,
        replies={200: Reply("The trigger and its fires (each: event, key, session).", TriggerReply),
                 404: Reply("`trigger_not_found`.")},
        tags=("triggers",),
    ),
    Route(
        "trigger_webhook", "POST", "/triggers/<trigger_id>",
        "A provider's webhook (GitHub, GitLab, generic) as it sends it, authenticated by its own "
        "signature (X-Hub-Signature-256, X-Gitlab-Token, X-WorkTrain-Signature), not the bearer "
        "token (README's Triggers).",
        body=WebhookBody,
        auth="signature",
        headers=(
            Header("X-GitHub-Event", "GitHub: the event (issues, issue_comment, ping, ...)."),
            Header("X-GitHub-Delivery", "GitHub: the delivery's GUID, the same on a redelivery."),
            Header("X-Hub-Signature-256", "GitHub: sha256=<hex HMAC-SHA256 of the raw body>."),
            Header("X-Gitlab-Token", "GitLab: the shared secret itself."),
            Header("Idempotency-Key", "GitLab: the same on its retries (the delivery id)."),
            Header("X-WorkTrain-Signature", "generic: sha256=<hex HMAC-SHA256 of the raw body>."),
        ),
        replies={
            202: Reply("What the event did: `sessionId` (started), `steered`, `queued`, `ignored` "
                       "(with the reason; a GitHub ping too), or `duplicate` (a redelivery).", TriggerFired),
            401: Reply("`bad_signature`: missing or not the trigger's secret."),
            404: Reply("`trigger_not_found`: no webhook trigger with that id."),
            415: Reply("`unsupported_media_type`: neither JSON nor GitHub's form encoding."),
            422: Reply("`trigger_error`: the event matched but could not be placed (a template "
                       "field the event lacks, a steer refused); said on the fire too."),
        },
        tags=("triggers",),
    ),
    Route(
        "workflows", "GET", "/workflows", "The workflow catalog.",
        replies={200: Reply("Workflows, and the files that were skipped.", replies.WorkflowsReply)},
        tags=("workflows",),
    ),
    Route(
        "openapi", "GET", "/openapi.json", "This document.",
        replies={200: Reply("The OpenAPI 3.1 document of this API.", replies.OpenApiDocument)},
        tags=("meta",),
    ),
    Route(
        "healthz", "GET", "/healthz", "Liveness: the process answers.", api=False,
        replies={200: Reply("Alive.", replies.HealthReply)},
        tags=("meta",),
    ),
    Route(
        "readyz", "GET", "/readyz", "Readiness: Redis answers a PING.", api=False,
        replies={
            200: Reply("Ready.", replies.ReadyReply),
            503: Reply("`not_ready`: Redis does not answer.", headers=RETRY),
        },
        tags=("meta",),
    ),
    Route(
        "workers", "GET", "/workers",
        "Every live worker process: host, pid, concurrency, sessions, sandbox layers (docs/operations.md).",
        replies={200: Reply("The live workers, by id.", WorkersReply)},
        tags=("fleet",),
    ),
    Route(
        "fleet", "GET", "/fleet",
        "The fleet at a glance: workers, queue, sessions, model calls, steers/min, delivery latency.",
        replies={200: Reply("The same numbers as /metrics, summarised.", FleetReply)},
        tags=("fleet",),
    ),
    Route(
        "fleet_history", "GET", "/fleet/history",
        "The fleet's history: one sample a minute for the last 24 hours (docs/operations.md).",
        query=FleetHistoryQuery,
        replies={200: Reply("The samples after `since`, oldest first.", FleetHistoryReply)},
        tags=("fleet",),
    ),
    Route(
        "metrics", "GET", "/metrics",
        "Prometheus metrics of the whole fleet (behind the token when one is set; docs/operations.md).",
        api=False,
        replies={
            200: Reply("The text exposition format.", None, "text/plain"),
            401: Reply("`unauthorized`: WORKTRAIN_API_TOKEN is set; the bearer token is missing or wrong."),
            503: Reply("Redis unavailable, or a standalone console.", headers=RETRY),
        },
        tags=("fleet",),
    ),
)  # fmt: skip
