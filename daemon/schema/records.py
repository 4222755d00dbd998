"""pydantic models of what WorkTrain keeps in Redis: session records, steers, journal entries."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.schema.turnmarks import SnapshotRef
from daemon.schema.workspace import BranchStrategy, Delivery, DeliveryMode, workspace_fields
from daemon.workflows.agentconfig import AgentConfig


class SessionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATUSES


FINISHED_STATUSES = frozenset({SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED})


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class SteerRef(Record):
    """What a coordinator gets back for an accepted (or de-duplicated) steer."""

    turnId: int
    offset: int
    clientMsgId: str | None = None


SteerMode = Literal["queue", "interrupt"]


class PendingSteer(Record):
    """One entry of a session's pending (and in-flight) list, as accept.lua writes it."""

    offset: int
    text: str
    turnId: int
    clientMsgId: str | None = None
    acceptedAt: str
    mode: SteerMode = "queue"
    traceparent: str | None = None  # W3C, of the steer's POST span (optional tracing, docs/operations.md)


class TriggerItem(Record):
    """The issue, pull request or merge request a trigger's session is about (README's Triggers)."""

    provider: Literal["github", "gitlab", "generic"]
    kind: Literal["issue", "pull_request", "merge_request", "other"]
    repo: str | None = None  # github: owner/name; gitlab: the project's id or path
    number: int | None = None  # github: the number; gitlab: the iid
    url: str | None = None  # where a person reads it (html_url, web_url)


class TriggerOrigin(Record):
    """Which trigger started a session and why (the record field `trigger`, JSON): shown by
    GET /api/v2/sessions/<id>, and read when the session finishes to comment on its item."""

    triggerId: str
    key: str  # what the session is about: one live session per key (whileRunning)
    event: str  # issues.labeled, pull_request (a poll), ...
    deliveryId: str
    item: TriggerItem | None = None
    # reportBack: comment: where the comment goes (the provider's API URL of the item's
    # comments or notes); None: no comment
    commentsUrl: str | None = None


def _trigger(raw: str | None) -> TriggerOrigin | None:
    return TriggerOrigin.model_validate_json(raw) if raw else None


def _int(raw: str | None, default: int = 0) -> int:
    return int(raw) if raw not in (None, "") else default


def _float(raw: str | None) -> float | None:
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def _agent_config(raw: str | None) -> AgentConfig | None:
    return AgentConfig.model_validate_json(raw) if raw else None


def _opt(raw: str | None) -> str | None:
    return raw if raw not in (None, "") else None


class ForkOf(Record):
    """A fork's source (README's Fork a session): the session and the turn it was forked after."""

    sessionId: str
    turn: int
    snapshot: SnapshotRef | None = Field(
        default=None,
        description="Where the worktree as it was at that turn's end is kept (worktree sessions; null: "
        "the fork shares the source's workspace, its conversation only was forked).",
    )


def _fork_of(raw: str | None) -> ForkOf | None:
    return ForkOf.model_validate_json(raw) if raw else None


class SessionRecord(Record):
    """The session record of README's HTTP API (the hash `wt:session:{id}`, plus the pending count)."""

    sessionId: str
    workflowId: str
    goal: str
    workspacePath: str
    context: dict[str, Any] | None = None
    status: SessionStatus
    turnId: int = 0
    turnCount: int = 0
    stepId: str | None = None
    stepTitle: str | None = None  # the current step's title, rendered ("step i/n — title")
    stepIndex: int = 0
    stepCount: int = 0
    gates: Literal["skip", "steer"] = "skip"  # requireConfirmation steps wait for a steer (docs/workflows.md)
    # what a live session waits for: "confirmation" (a step waits for a coordinator's steer),
    # "model_slot" (the fleet-wide cap), "model_retry" (a retry's backoff)
    waitingFor: str | None = None
    pendingSteers: int = 0
    steerOffset: int = 0
    deliveredOffset: int = 0
    createdAt: str
    startedAt: str | None = None
    endedAt: str | None = None
    outcome: str | None = None
    outcomeDetail: str | None = None
    worker: str | None = None
    attempt: int = 0
    cancelRequested: bool = False
    fatalIssue: bool = False  # the agent reported a fatal issue: its next continue_workflow ends it
    # The workflow engine's state (JSON, daemon.tools.base.SavedCursor): the worker's own, not served.
    workflowState: str | None = Field(default=None, exclude=True)
    # Usage (docs/DEVELOPING.md): running sums over every model call of every attempt
    inputTokens: int = 0
    outputTokens: int = 0
    cacheReadTokens: int = 0
    cacheWriteTokens: int = 0
    compactions: int = 0  # times the history was compacted (docs/DEVELOPING.md)
    # The model it runs (docs/DEVELOPING.md): resolved at dispatch (dispatch > workflow > environment)
    agentConfig: AgentConfig | None = None
    # What its usage cost at the price table's rates (daemon/agent/prices.json); None: unknown model
    costUsd: float | None = None
    # Sub-agents (README's Sub-agents and questions): set on a session spawn_agent started; a root has depth 0
    parentSessionId: str | None = None
    rootSessionId: str | None = None
    depth: int = 0
    signalOffset: int = 0  # coordinator signals so far (README's Sub-agents and questions)
    # The files the agent read, with their stamps (daemon.tools.ledger): the worker's own, not served.
    readFiles: str | None = Field(default=None, exclude=True)
    # The workspace (README's Coding sessions, daemon.schema.workspace): the dispatch's choice, and
    # what delivery did
    branchStrategy: BranchStrategy = "none"
    deliveryMode: DeliveryMode = "commit"
    baseRef: str | None = None
    branch: str | None = None
    keepWorktree: bool = False
    delivery: Delivery | None = None
    callbackUrl: str | None = None  # the session's webhook receiver (README's Webhooks)
    trigger: TriggerOrigin | None = None  # the trigger that started it (README's Triggers)
    forkOf: ForkOf | None = Field(default=None, description="Set on a fork: its source and turn.")
    # The read grants fixed when the worker placed the workspace (docs/security.md): the worker's own
    sandboxRead: list[str] | None = Field(default=None, exclude=True)
    branchExisted: bool | None = Field(
        default=None,
        description="The branch was in the repository before the session: delivery only fast-forwards "
        "it (null until the worktree is placed).",
    )

    @classmethod
    def from_hash(cls, fields: dict[str, str], pending: int) -> SessionRecord:
        context = fields.get("context")
        return cls(
            sessionId=fields["sessionId"],
            workflowId=fields.get("workflowId", ""),
            goal=fields.get("goal", ""),
            workspacePath=fields.get("workspacePath", ""),
            context=json.loads(context) if context else None,
            status=SessionStatus(fields["status"]),
            turnId=_int(fields.get("turnId")),
            turnCount=_int(fields.get("turnCount")),
            stepId=_opt(fields.get("stepId")),
            stepTitle=_opt(fields.get("stepTitle")),
            stepIndex=_int(fields.get("stepIndex")),
            stepCount=_int(fields.get("stepCount")),
            gates="steer" if fields.get("gates") == "steer" else "skip",
            waitingFor=_opt(fields.get("waitingFor")),
            pendingSteers=pending,
            steerOffset=_int(fields.get("steerOffset")),
            deliveredOffset=_int(fields.get("deliveredOffset")),
            createdAt=fields.get("createdAt", ""),
            startedAt=_opt(fields.get("startedAt")),
            endedAt=_opt(fields.get("endedAt")),
            outcome=_opt(fields.get("outcome")),
            outcomeDetail=_opt(fields.get("outcomeDetail")),
            worker=_opt(fields.get("worker")),
            attempt=_int(fields.get("attempt")),
            cancelRequested=fields.get("cancelRequested") == "1",
            fatalIssue=fields.get("fatalIssue") == "1",
            workflowState=_opt(fields.get("workflowState")),
            inputTokens=_int(fields.get("inputTokens")),
            outputTokens=_int(fields.get("outputTokens")),
            cacheReadTokens=_int(fields.get("cacheReadTokens")),
            cacheWriteTokens=_int(fields.get("cacheWriteTokens")),
            compactions=_int(fields.get("compactions")),
            agentConfig=_agent_config(fields.get("agentConfig")),
            costUsd=_float(fields.get("costUsd")),
            parentSessionId=_opt(fields.get("parentSessionId")),
            rootSessionId=_opt(fields.get("rootSessionId")),
            depth=_int(fields.get("depth")),
            signalOffset=_int(fields.get("signalOffset")),
            readFiles=_opt(fields.get("readFiles")),
            callbackUrl=_opt(fields.get("callbackUrl")),
            trigger=_trigger(fields.get("trigger")),
            forkOf=_fork_of(fields.get("forkOf")),
            **workspace_fields(fields),
        )


JournalType = Literal["accepted", "delivered", "undelivered", "retracted", "edited"]


class JournalEntry(Record):
    """One entry of the durable steer journal (stream `wt:session:{id}:steers`)."""

    id: str
    type: JournalType
    at: str
    offset: int | None = None
    offsets: list[int] | None = None
    turnId: int | None = None
    text: str | None = None  # accepted: the text; edited: the new one; retracted: the last one
    previousText: str | None = None  # edited, by versions before the hash: the replaced text
    previousHash: str | None = None  # edited: SHA-1 (hex) of the UTF-8 text it replaced
    previousLength: int | None = None  # edited: that text's length in bytes
    clientMsgId: str | None = None
    mode: SteerMode | None = None  # accepted with "interrupt"

    @classmethod
    def from_stream(cls, entry_id: str, fields: dict[str, str]) -> JournalEntry:
        offsets = fields.get("offsets")
        return cls(
            id=entry_id,
            type=fields["type"],  # type: ignore[arg-type]
            at=fields.get("at", ""),
            offset=_int(fields["offset"]) if "offset" in fields else None,
            offsets=json.loads(offsets) if offsets else None,
            turnId=_int(fields["turnId"]) if "turnId" in fields else None,
            text=fields.get("text"),
            previousText=fields.get("previousText"),
            previousHash=_opt(fields.get("previousHash")),
            previousLength=_int(fields["previousLength"]) if "previousLength" in fields else None,
            clientMsgId=_opt(fields.get("clientMsgId")),
            mode=fields.get("mode"),  # type: ignore[arg-type]
        )


SteerState = Literal["pending", "delivered", "undelivered", "retracted"]


class SteerView(Record):
    """One steer with its delivery state, folded from the journal (GET .../steers, README's Managing
    steers)."""

    offset: int
    text: str  # the text the model sees (or saw): the accepted one, or its last edit
    turnId: int  # the live turn at acceptance (kept for older clients: acceptedTurnId)
    acceptedTurnId: int
    clientMsgId: str | None
    acceptedAt: str
    mode: SteerMode = "queue"
    state: SteerState
    deliveredTurnId: int | None = None
    deliveredAt: str | None = None
    edits: int = 0  # how many times it was edited (each edit's previous text is in the journal)
    editedAt: str | None = None
    retractedAt: str | None = None

    @property
    def settled(self) -> bool:
        """No longer pending: what a receipt wait waits for."""
        return self.state != "pending"


def _accepted(entry: JournalEntry, offset: int) -> SteerView:
    turn = entry.turnId or 0
    return SteerView(
        offset=offset,
        text=entry.text or "",
        turnId=turn,
        acceptedTurnId=turn,
        clientMsgId=entry.clientMsgId,
        acceptedAt=entry.at,
        mode=entry.mode or "queue",
        state="pending",
    )


def _changed(view: SteerView, entry: JournalEntry) -> SteerView:
    """`view` after one later journal entry naming it."""
    if entry.type == "delivered":
        delivered = {"state": "delivered", "deliveredTurnId": entry.turnId, "deliveredAt": entry.at}
        return view.model_copy(update=delivered)
    if entry.type == "undelivered":
        return view.model_copy(update={"state": "undelivered"})
    if entry.type == "retracted":
        return view.model_copy(update={"state": "retracted", "retractedAt": entry.at})
    if entry.type == "edited":
        edited = {"text": entry.text or "", "edits": view.edits + 1, "editedAt": entry.at}
        return view.model_copy(update=edited)
    return view


def _named(entry: JournalEntry) -> list[int]:
    """The offsets a non-accept entry is about (delivered/undelivered name several)."""
    if entry.offsets is not None:
        return entry.offsets
    return [] if entry.offset is None else [entry.offset]


class SteerFold:
    """The journal folded into one view per steer, entry by entry (a receipt wait applies
    the entries it reads after the first fold)."""

    def __init__(self) -> None:
        self.views: dict[int, SteerView] = {}

    def apply(self, entries: list[JournalEntry]) -> SteerFold:
        views = self.views
        for entry in entries:
            if entry.type == "accepted":
                if entry.offset is not None:
                    views[entry.offset] = _accepted(entry, entry.offset)
                continue
            for offset in _named(entry):
                view = views.get(offset)
                if view is not None:
                    views[offset] = _changed(view, entry)
        return self

    def sorted(self) -> list[SteerView]:
        return [self.views[offset] for offset in sorted(self.views)]


def fold_journal(entries: list[JournalEntry]) -> list[SteerView]:
    """Fold accept/deliver/undeliver/retract/edit entries into one view per steer, in offset order."""
    return SteerFold().apply(entries).sorted()
