"""Webhook payloads and signatures (README's Webhooks): pure functions, no Redis, no network.

Four of a running attempt's events, and a fork's making, tell a coordinator something it
waits for; each becomes one POST per receiver (the session's `callbackUrl` and every
`WORKTRAIN_WEBHOOK_URLS`):

| event                                   | webhook             |
| --------------------------------------- | ------------------- |
| `session_completed`                     | `session.finished`  |
| `coordinator_signal` with `wait: true`  | `session.question`  |
| `session_delivered`                     | `session.delivered` |
| `issue_reported`                        | `issue.reported`    |
| `session_forked` (at the fork's dispatch) | `session.forked`    |

A session a trigger started with `reportBack: comment` also gets one `trigger.comment`
delivery at its end (README's Triggers): not a POST of this body but a comment on the
issue, pull request or merge request, made by the trigger's comment poster
(daemon/triggers/reportback.py) through the same outbox: retried, never posted twice.

The body is built once, when the event is recorded, and stored as the exact bytes that are
sent (so every retry is the same body, the same `id`, the same signature). The signature is
GitHub's scheme: `X-WorkTrain-Signature: sha256=<hex HMAC-SHA256 of the raw body>`.
"""

from __future__ import annotations

import hashlib
import hmac
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict
from ulid import ULID

from daemon.host.clock import utc_now_iso
from daemon.schema.events import (
    CoordinatorSignal,
    EventBase,
    IssueReported,
    SessionCompleted,
    SessionDelivered,
    SessionForked,
)
from daemon.schema.records import TriggerOrigin

WebhookType = Literal[
    "session.finished",
    "session.question",
    "session.delivered",
    "issue.reported",
    "trigger.comment",
    "session.forked",
]
WEBHOOK_TYPES: tuple[WebhookType, ...] = (
    "session.finished",
    "session.question",
    "session.delivered",
    "issue.reported",
    "trigger.comment",
    "session.forked",
)
COMMENT_TYPE: WebhookType = "trigger.comment"
EVENT_HEADER = "X-WorkTrain-Event"
DELIVERY_HEADER = "X-WorkTrain-Delivery"
SIGNATURE_HEADER = "X-WorkTrain-Signature"
MAX_URL_LENGTH = 2048


class InvalidCallbackUrl(ValueError):
    """A receiver URL that is not an absolute http(s) URL."""


def check_receiver_url(url: str) -> str:
    """`url` if it is an absolute http:// or https:// URL with a host, else InvalidCallbackUrl.
    (Receivers are chosen by the operator or a token holder; other schemes never leave here.)"""
    if len(url) > MAX_URL_LENGTH or any(c.isspace() for c in url):
        raise InvalidCallbackUrl("callbackUrl must be an http(s) URL without spaces, at most 2048 characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidCallbackUrl("callbackUrl must be an absolute http:// or https:// URL")
    return url


def fleet_urls(raw: str) -> tuple[str, ...]:
    """`WORKTRAIN_WEBHOOK_URLS`: comma-separated, each checked (InvalidCallbackUrl)."""
    return tuple(check_receiver_url(part.strip()) for part in raw.split(",") if part.strip())


def new_delivery_id() -> str:
    return f"whd_{ULID()}"


def sign(secret: str, body: bytes) -> str:
    """The X-WorkTrain-Signature value for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, signature: str) -> bool:
    """What a receiver does (docs/operations.md): constant-time compare."""
    return hmac.compare_digest(sign(secret, body), signature)


def headers(event: str, delivery_id: str, body: bytes, secret: str | None) -> dict[str, str]:
    out = {
        "Content-Type": "application/json",
        "User-Agent": "WorkTrain-Webhook/1",
        EVENT_HEADER: event,
        DELIVERY_HEADER: delivery_id,
    }
    if secret:
        out[SIGNATURE_HEADER] = sign(secret, body)
    return out


# --- payloads --------------------------------------------------------------------------


class SessionFacts(BaseModel):
    """What a payload says about its session, read from the record when the event is recorded."""

    model_config = ConfigDict(frozen=True)

    workflowId: str = ""
    goal: str = ""
    callbackUrl: str | None = None
    parentSessionId: str | None = None
    inputTokens: int = 0
    outputTokens: int = 0
    cacheReadTokens: int = 0
    cacheWriteTokens: int = 0
    costUsd: float | None = None  # docs/DEVELOPING.md (issue 34 fills the record field; None until then)
    trigger: str | None = None  # the record's `trigger` (README's Triggers), JSON: its report back

    def comments_url(self) -> str | None:
        """reportBack: comment: where the session's end is said (None: nowhere)."""
        if not self.trigger:
            return None
        try:
            return TriggerOrigin.model_validate_json(self.trigger).commentsUrl
        except ValueError:
            return None


class WebhookPayload(BaseModel):
    """The JSON body of one POST. Common fields first; each type fills its own."""

    model_config = ConfigDict(frozen=True)

    type: WebhookType
    id: str  # the delivery id: X-WorkTrain-Delivery, the same on every retry
    at: str  # when the event happened
    sessionId: str
    workflowId: str
    goal: str  # its first line
    parentSessionId: str | None = None
    # session.finished
    status: str | None = None
    outcome: str | None = None
    outcomeDetail: str | None = None
    usage: dict[str, int] | None = None
    costUsd: float | None = None
    # session.question
    question: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    # session.delivered
    delivery: dict[str, Any] | None = None
    # issue.reported
    issue: dict[str, Any] | None = None
    # session.forked: the source and its turn
    forkOf: dict[str, Any] | None = None
    conversationOnly: bool | None = None


@dataclass(frozen=True, slots=True)
class WebhookRouting:
    """Where a process sends its sessions' webhooks: the fleet-wide receivers, and the API's
    public URL (a question's payload says where to answer)."""

    urls: tuple[str, ...] = ()
    public_url: str = ""

    @classmethod
    def of(cls, urls: str, public_url: str) -> WebhookRouting:
        """From `WORKTRAIN_WEBHOOK_URLS` and `WORKTRAIN_URL`."""
        return cls(fleet_urls(urls), public_url)

    def notifies(self, facts: SessionFacts) -> bool:
        """Whether a session has anywhere its events go: a receiver, or a report back."""
        return bool(self.receivers(facts)) or facts.comments_url() is not None

    def receivers(self, facts: SessionFacts) -> list[str]:
        chosen = [facts.callbackUrl] if facts.callbackUrl else []
        return list(dict.fromkeys([*chosen, *self.urls]))  # each once, the session's own first


def webhook_type(event: EventBase) -> WebhookType | None:
    if isinstance(event, SessionCompleted):
        return "session.finished"
    if isinstance(event, CoordinatorSignal) and event.wait:
        return "session.question"
    if isinstance(event, SessionDelivered):
        return "session.delivered"
    if isinstance(event, IssueReported):
        return "issue.reported"
    if isinstance(event, SessionForked):
        return "session.forked"
    return None


def notifies(events: Sequence[EventBase]) -> bool:
    return any(webhook_type(event) is not None for event in events)


def _specific(
    event: EventBase, facts: SessionFacts, routing: WebhookRouting, signal_data: Any
) -> dict[str, Any]:
    if isinstance(event, SessionCompleted):
        return {
            "status": event.status,
            "outcome": event.outcome,
            "outcomeDetail": event.detail,
            "usage": {
                "inputTokens": facts.inputTokens,
                "outputTokens": facts.outputTokens,
                "cacheReadTokens": facts.cacheReadTokens,
                "cacheWriteTokens": facts.cacheWriteTokens,
            },
            "costUsd": facts.costUsd,
        }
    if isinstance(event, CoordinatorSignal):
        path = f"/api/v2/sessions/{event.sessionId}/steer"
        return {
            "question": {
                "offset": event.offset,
                "kind": event.signalKind,
                "summary": event.summary,
                "data": signal_data,
                "turnId": event.turnId,
            },
            "answer": {
                "method": "POST",
                "url": routing.public_url.rstrip("/") + path if routing.public_url else path,
                "body": {"text": "<your answer>"},
                "cli": f"worktrain reply {event.sessionId} '<your answer>'",
                "mcp": "reply",
            },
        }
    if isinstance(event, SessionDelivered):
        return {"delivery": event.model_dump(exclude={"kind", "sessionId", "ts"})}
    if isinstance(event, IssueReported):
        issue = {"kind": event.issueKind, "severity": event.severity, "summary": event.summary}
        return {"issue": {**issue, "turnId": event.turnId}}
    if isinstance(event, SessionForked):
        return {
            "forkOf": {"sessionId": event.forkOf, "turn": event.turn},
            "conversationOnly": event.conversationOnly,
        }
    return {}


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """One POST to queue: built when its event is recorded."""

    id: str
    type: WebhookType
    url: str
    sessionId: str
    body: str  # the exact JSON sent


def build_deliveries(
    events: Sequence[EventBase],
    facts: SessionFacts,
    routing: WebhookRouting,
    signal_data: dict[int, Any] | None = None,
) -> list[NewDelivery]:
    """The deliveries the webhook-bearing events of one batch ask for (none without receivers).
    `signal_data`: a question's `data`, by signal offset (the event does not carry it)."""
    receivers = routing.receivers(facts)
    out: list[NewDelivery] = []
    for event in events:
        kind = webhook_type(event)
        if kind is None:
            continue
        data = (signal_data or {}).get(event.offset) if isinstance(event, CoordinatorSignal) else None
        specific = _specific(event, facts, routing, data)
        for url in receivers:
            delivery_id = new_delivery_id()
            payload = WebhookPayload(
                type=kind,
                id=delivery_id,
                at=event.ts or utc_now_iso(),
                sessionId=event.sessionId,
                workflowId=facts.workflowId,
                goal=first_line(facts.goal),
                parentSessionId=facts.parentSessionId,
                **specific,
            )
            body = payload.model_dump_json(exclude_none=True)
            out.append(NewDelivery(delivery_id, kind, url, event.sessionId, body))
        comments = facts.comments_url()
        if isinstance(event, SessionCompleted) and comments is not None:
            job = CommentJob(sessionId=event.sessionId, commentsUrl=comments, trigger=facts.trigger or "")
            out.append(
                NewDelivery(new_delivery_id(), COMMENT_TYPE, comments, event.sessionId, job.model_dump_json())
            )
    return out


class CommentJob(BaseModel):
    """The body of a `trigger.comment` delivery: what to say where (the text is made when it
    is sent, from the finished session: its outcome, branch and final notes)."""

    model_config = ConfigDict(frozen=True)

    sessionId: str
    commentsUrl: str
    trigger: str  # the record's TriggerOrigin JSON


def first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --- retries ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """README's Webhooks: 1 s doubling to 1 h, with jitter, for 24 h; a 10 s timeout per attempt."""

    base_seconds: float = 1.0
    max_seconds: float = 3600.0
    give_up_seconds: float = 86400.0
    timeout_seconds: float = 10.0

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        """The wait after the `attempts`-th failed try (1 for the first): the doubled delay,
        capped, with 'equal jitter' (half fixed, half random) so receivers coming back are
        not hit by every sender at once yet a retry never comes much too early."""
        step = min(self.base_seconds * float(2 ** min(max(attempts - 1, 0), 40)), self.max_seconds)
        jitter: float = (rng or random).uniform(0, step / 2)
        return step / 2 + jitter


def succeeded(status: int | None) -> bool:
    return status is not None and 200 <= status < 300
