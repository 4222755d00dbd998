"""The bodies the API answers with, as pydantic models: the OpenAPI document's response
schemas (web/routes.py). Where a route serves a daemon model (a session record, a steer
view), the reply uses that very model, so the document cannot drift from what is sent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, create_model

from daemon.bus.outbox.webhooks import DeliveryView
from daemon.bus.session.conversation import ConversationMessage
from daemon.bus.session.forks import ForkSummary
from daemon.bus.session.spawns import ChildSummary
from daemon.host.ids import SESSION_ID_RE
from daemon.schema.records import ForkOf, SessionRecord, SessionStatus, SteerRef, SteerView
from daemon.schema.signals import Signal

SessionId = Field(pattern=SESSION_ID_RE.pattern)
# What the session list leaves out of each record (GET /sessions/<id> has them): a page of
# records must stay small whatever goals and contexts were dispatched.
LIST_OMITS = frozenset({"goal", "context"})


class Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorReply(BaseModel):
    """Every error: a stable `code` and a sentence; some codes add fields (stale_turn)."""

    model_config = ConfigDict(extra="allow")

    success: Literal[False]
    code: str
    error: str


class SteerReply(Reply):
    success: Literal[True]
    status: Literal["accepted", "duplicate"]
    steer: SteerRef


class DispatchWarning(Reply):
    code: Literal["unknown_model"]
    message: str


class DispatchData(Reply):
    sessionId: str = SessionId
    status: SessionStatus = Field(description="`queued`; for a repeated Idempotency-Key, its status now.")
    workflowId: str
    duplicate: Literal[True] | None = Field(
        default=None, description="Present (true) when an Idempotency-Key repeat answers the first session."
    )
    warnings: list[DispatchWarning] | None = Field(
        default=None,
        description="Present when the session was dispatched but something looks wrong: `unknown_model`"
        " (a model the price table does not know: its cost stays unknown).",
    )


class DispatchReply(Reply):
    success: Literal[True]
    data: DispatchData


_SUMMARY_FIELDS: dict[str, Any] = {
    name: (field.annotation, field)
    for name, field in SessionRecord.model_fields.items()
    if name not in LIST_OMITS
}
GOAL_PREVIEW_CHARS = 200  # the list's `goalPreview`: the goal's first characters (console, top)
_SUMMARY_FIELDS["goalPreview"] = (
    str,
    Field(default="", description=f"The goal's first {GOAL_PREVIEW_CHARS} characters."),
)
SessionSummary = create_model(
    "SessionSummary",
    __config__=ConfigDict(extra="forbid"),
    __doc__="A session record without goal and context (GET /sessions/<id> has them), with a goal preview.",
    **_SUMMARY_FIELDS,
)


class SessionPage(Reply):
    sessions: list[SessionSummary]  # type: ignore[valid-type]
    totalCount: int


class SessionsReply(Reply):
    success: Literal[True]
    data: SessionPage


class ForkData(Reply):
    sessionId: str = SessionId
    status: SessionStatus = Field(description="`queued`; for a repeated Idempotency-Key, its status now.")
    workflowId: str
    forkOf: ForkOf
    conversationOnly: bool = Field(
        description="true: the source is not a worktree session, so only its conversation was forked;"
        " the fork works in the same workspace as it is now (`note` says so)."
    )
    note: str | None = None
    duplicate: Literal[True] | None = Field(
        default=None, description="Present (true) when an Idempotency-Key repeat answers the first fork."
    )


class ForkReply(Reply):
    success: Literal[True]
    data: ForkData


class CancelData(Reply):
    sessionId: str = SessionId
    status: Literal["cancelled", "cancel_requested"]


class CancelReply(Reply):
    success: Literal[True]
    data: CancelData


class SteersData(Reply):
    sessionId: str = SessionId
    steers: list[SteerView]
    next: int = Field(description="Pass as `since` for the next page (the last offset of this one).")


class SteersReply(Reply):
    success: Literal[True]
    data: SteersData


class OneSteerReply(Reply):
    """One steer (README's Managing steers): by offset, or by clientMsgId on the journal's route."""

    success: Literal[True]
    data: SteerView


class SteersAnswer(RootModel[SteersReply | OneSteerReply]):
    """`GET .../steers`: a page of the journal, or — with `clientMsgId` — that one steer."""


class SteerChangeReply(Reply):
    success: Literal[True]
    status: Literal["retracted", "edited"]
    steer: SteerView


class StreamItem(BaseModel):
    """One stream entry: the stored object plus `id`, its cursor."""

    model_config = ConfigDict(extra="allow")

    id: str


class EventsData(Reply):
    events: list[StreamItem]
    next: str


class EventsReply(Reply):
    success: Literal[True]
    data: EventsData


class IssuesData(Reply):
    issues: list[StreamItem]
    next: str


class IssuesReply(Reply):
    success: Literal[True]
    data: IssuesData


class StepSummary(Reply):
    id: str
    title: str
    loopId: str | None = Field(default=None, description="The loop whose body the step is in.")


class LoopSummary(Reply):
    id: str
    type: str
    maxIterations: int


class SkippedFile(Reply):
    file: str
    reason: str


class WorkflowSummary(Reply):
    id: str
    name: str
    description: str
    version: str
    stepCount: int
    steps: list[StepSummary]
    loops: list[LoopSummary]


class WorkflowsData(Reply):
    workflows: list[WorkflowSummary]
    problems: dict[str, str] = Field(description="File name -> why it was skipped.")
    skipped: list[SkippedFile] = Field(description="The same, as a list: each skipped file with its reason.")


class WorkflowsReply(Reply):
    success: Literal[True]
    data: WorkflowsData


class HealthReply(Reply):
    success: Literal[True]
    status: Literal["ok"]


class ReadyReply(Reply):
    success: Literal[True]
    status: Literal["ready"]
    mode: Literal["standalone"] | None = None


class OpenApiDocument(BaseModel):
    model_config = ConfigDict(extra="allow")

    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]


class SessionDetail(SessionRecord):
    """One session's record, with its children (README's Sub-agents and questions) and the question it
    waits on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    children: list[ChildSummary] = Field(default_factory=list, description="Sessions it spawned, in order.")
    forks: list[ForkSummary] = Field(
        default_factory=list, description="Sessions forked from it, in the order they were made."
    )
    pendingQuestion: Signal | None = Field(
        default=None, description="Its newest signal, when that one waits for a reply (`waitingFor: reply`)."
    )


class SessionDetailReply(Reply):
    success: Literal[True]
    data: SessionDetail


class ConversationData(Reply):
    sessionId: str = SessionId
    messages: list[ConversationMessage] = Field(
        description="The checkpointed history, oldest first (the live turn's reply joins it once"
        " received); each message with its `turnId` (the numbering of the record, the events and the"
        " steer journal); a tool result over 20 000 characters is cut and listed in the message's `cut`."
    )


class ConversationReply(Reply):
    success: Literal[True]
    data: ConversationData


class SignalsData(Reply):
    sessionId: str = SessionId
    signals: list[Signal]
    next: int = Field(description="Pass as `since` for the next page (the last offset of this one).")


class WebhooksData(Reply):
    deliveries: list[DeliveryView]
    pending: int = Field(description="Deliveries waiting for a (next) try, fleet-wide.")


class WebhooksReply(Reply):
    success: Literal[True]
    data: WebhooksData


class SessionWebhooksData(Reply):
    sessionId: str = SessionId
    deliveries: list[DeliveryView]


class SessionWebhooksReply(Reply):
    success: Literal[True]
    data: SessionWebhooksData


class SignalsReply(Reply):
    success: Literal[True]
    data: SignalsData


class GlobalSignalsData(Reply):
    signals: list[StreamItem]
    next: str


class GlobalSignalsReply(Reply):
    success: Literal[True]
    data: GlobalSignalsData
