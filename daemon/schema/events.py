"""Events (docs/DEVELOPING.md): a frozen discriminated union, and the pure helpers that
fill their fields. Written by daemon/bus/streams/eventsink.py `EventSink`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.host.clock import utc_now_iso

REPLY_TEXT_MAX_BYTES = 4096  # llm_turn_completed.text (docs/DEVELOPING.md)
INPUT_SUMMARY_MAX_BYTES = 1024  # tool_call_started.inputSummary


class EventBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    sessionId: str
    ts: str = Field(default_factory=utc_now_iso)


class SessionQueued(EventBase):
    kind: Literal["session_queued"] = "session_queued"
    workflowId: str
    goal: str


class SessionForked(EventBase):
    """A fork was made (README's Fork a session): on the fork's own stream, right after its
    `session_queued` (the source, which may have ended, is never written to)."""

    kind: Literal["session_forked"] = "session_forked"
    forkOf: str  # the source session
    turn: int  # the source's turn the fork carries on after
    conversationOnly: bool = False  # a none/read-only source: the fork shares its workspace


class SessionStarted(EventBase):
    kind: Literal["session_started"] = "session_started"
    worker: str
    attempt: int = 1


class SessionResumed(EventBase):
    kind: Literal["session_resumed"] = "session_resumed"
    fromTurn: int
    worker: str


class TurnStarted(EventBase):
    kind: Literal["turn_started"] = "turn_started"
    turnId: int


class TurnEnded(EventBase):
    kind: Literal["turn_ended"] = "turn_ended"
    turnId: int
    toolCalls: int = 0


class LlmTurnCompleted(EventBase):
    kind: Literal["llm_turn_completed"] = "llm_turn_completed"
    turnId: int
    stopReason: str | None
    inputTokens: int = 0
    outputTokens: int = 0
    cacheReadTokens: int = 0
    cacheWriteTokens: int = 0
    text: str = ""  # the reply's text blocks, joined by a blank line, capped at 4 KiB


class ToolCallStarted(EventBase):
    kind: Literal["tool_call_started"] = "tool_call_started"
    turnId: int
    toolName: str
    toolUseId: str
    inputSummary: str = ""  # a short form of the input (daemon.schema.events.input_summary), <= 1 KiB


class ToolCallCompleted(EventBase):
    kind: Literal["tool_call_completed"] = "tool_call_completed"
    turnId: int
    toolName: str
    toolUseId: str
    durationMs: int = 0
    # the start of what the tool returned (capped: RESULT_SUMMARY_CHARS), for people watching
    resultSummary: str | None = None


class ToolCallFailed(EventBase):
    kind: Literal["tool_call_failed"] = "tool_call_failed"
    turnId: int
    toolName: str
    toolUseId: str
    error: str


class StepAdvanced(EventBase):
    kind: Literal["step_advanced"] = "step_advanced"
    turnId: int
    fromStepId: str | None
    toStepId: str | None  # None: the workflow is complete
    stepIndex: int
    stepCount: int
    notes: str = ""  # the agent's notes on the step it completed (continue_workflow)
    context: dict[str, Any] | None = None  # facts the agent carried forward with them
    artifacts: list[dict[str, Any]] | None = None  # the step's typed outputs (wr.loop_control, ...)


class SteerAccepted(EventBase):
    kind: Literal["steer_accepted"] = "steer_accepted"
    turnId: int
    offset: int
    clientMsgId: str | None = None
    mode: Literal["queue", "interrupt"] | None = None  # "interrupt" (README's Managing steers); None: queue


class SteerRetracted(EventBase):
    """A pending steer was withdrawn (README's Managing steers): no model call sees it."""

    kind: Literal["steer_retracted"] = "steer_retracted"
    offset: int


class SteerEdited(EventBase):
    """A pending steer's text was rewritten in place (README's Managing steers); the journal keeps both."""

    kind: Literal["steer_edited"] = "steer_edited"
    offset: int


class SteerDelivered(EventBase):
    kind: Literal["steer_delivered"] = "steer_delivered"
    turnId: int  # the turn that receives the steers
    offsets: list[int]


class SteerUndelivered(EventBase):
    kind: Literal["steer_undelivered"] = "steer_undelivered"
    offsets: list[int]


class IssueReported(EventBase):
    kind: Literal["issue_reported"] = "issue_reported"
    turnId: int
    issueKind: str  # `kind` is the event's discriminator, so the issue's own kind is renamed
    severity: str
    summary: str


class AgentStuck(EventBase):
    kind: Literal["agent_stuck"] = "agent_stuck"
    turnId: int
    reason: str


class TurnInterrupted(EventBase):
    """An interrupt steer cut the live turn short (README's Managing steers). `phase` "model": the model
    call was abandoned (nothing of its reply kept); "tools": its reply stands, `skipped`
    tool calls did not start and `stopped` is the one that was running (a Bash command,
    killed), if any."""

    kind: Literal["turn_interrupted"] = "turn_interrupted"
    turnId: int
    phase: Literal["model", "tools"]
    skipped: int = 0
    stopped: str | None = None  # the toolUseId of the tool call that was stopped


class ModelRetry(EventBase):
    """A model call failed and will be tried again after `waitSeconds` (docs/DEVELOPING.md)."""

    kind: Literal["model_retry"] = "model_retry"
    turnId: int
    status: int | None  # the HTTP status (529, 429, ...); None: no answer (connection, timeout)
    attempt: int  # which call of this turn failed: 1 for the first
    waitSeconds: float
    error: str = ""  # what failed, in a few words (`overloaded_error: Overloaded`)


class ContextCompacted(EventBase):
    """The history was compacted before a model call (docs/DEVELOPING.md)."""

    kind: Literal["context_compacted"] = "context_compacted"
    turnId: int
    beforeTokens: int  # the estimated request before (or the API's count, after a 400)
    afterTokens: int  # the estimated request after
    turnsSummarized: int
    summary: Literal["model", "digest"] = "model"  # digest: the summary call failed


class SessionCompleted(EventBase):
    kind: Literal["session_completed"] = "session_completed"
    status: str  # completed | failed | cancelled
    outcome: str  # workflow_complete, incomplete, max_turns, workspace_not_found, ...
    detail: str = ""


class CoordinatorSignal(EventBase):
    """The agent spoke to its coordinator (`signal_coordinator`, README's Sub-agents and questions)."""

    kind: Literal["coordinator_signal"] = "coordinator_signal"
    turnId: int
    offset: int
    signalKind: str  # progress | finding | question | blocked | result
    summary: str
    wait: bool = False  # the agent waits for a reply (a steer)


class ChildrenSpawned(EventBase):
    """`spawn_agent` started (or found, on a resumed attempt) these child sessions (README's Sub-agents
    and questions)."""

    kind: Literal["children_spawned"] = "children_spawned"
    turnId: int
    children: list[str]
    toolUseId: str


class SessionDelivered(EventBase):
    """A worktree session's work was delivered (README's Coding sessions): committed, pushed, handed on."""

    kind: Literal["session_delivered"] = "session_delivered"
    state: str  # delivered | partial | failed
    branch: str
    headCommit: str | None = None
    commits: int = 0
    pushed: bool = False
    error: str | None = None


class WebhookFailed(EventBase):
    """A webhook delivery was given up after 24 h of retries (README's Webhooks). Written to the
    global stream only: the session's own stream ends with its `session_completed`."""

    kind: Literal["webhook_failed"] = "webhook_failed"
    deliveryId: str
    event: str  # session.finished | session.question | session.delivered | issue.reported
    url: str
    attempts: int
    lastStatus: int | None = None
    lastError: str | None = None


Event = Annotated[
    SessionQueued
    | SessionForked
    | SessionStarted
    | SessionResumed
    | TurnStarted
    | TurnEnded
    | LlmTurnCompleted
    | ToolCallStarted
    | ToolCallCompleted
    | ToolCallFailed
    | StepAdvanced
    | SteerAccepted
    | SteerDelivered
    | SteerUndelivered
    | SteerRetracted
    | SteerEdited
    | TurnInterrupted
    | IssueReported
    | AgentStuck
    | ModelRetry
    | ContextCompacted
    | SessionCompleted
    | CoordinatorSignal
    | ChildrenSpawned
    | SessionDelivered
    | WebhookFailed,
    Field(discriminator="kind"),
]


def capped(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8 (never inside a character), marked with `…`."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[: max_bytes - 3].decode(errors="ignore") + "…"


def reply_text(texts: Sequence[str]) -> str:
    """llm_turn_completed.text: what the agent said this turn."""
    return capped("\n\n".join(t for t in texts if t), REPLY_TEXT_MAX_BYTES)


def input_summary(tool_input: dict[str, Any], string_chars: int = 200) -> str:
    """tool_call_started.inputSummary: the input as compact JSON, each long string shortened
    to its start and its length (a Write's content, a long command), capped at 1 KiB."""

    def short(value: Any) -> Any:
        if isinstance(value, str) and len(value) > string_chars:
            return f"{value[:string_chars]}… ({len(value)} chars)"
        if isinstance(value, dict):
            return {k: short(v) for k, v in value.items()}
        if isinstance(value, list):
            return [short(v) for v in value[:20]] + ([f"… ({len(value)} items)"] if len(value) > 20 else [])
        return value

    text = json.dumps(short(tool_input), ensure_ascii=False, separators=(", ", ": "), default=str)
    return capped(text, INPUT_SUMMARY_MAX_BYTES)


def ending_events(
    session_id: str, status: str, outcome: str, detail: str, undelivered: Sequence[int]
) -> list[EventBase]:
    """What a session's end emits: `steer_undelivered` (when steers were left), then
    `session_completed`. Shared by the worker's finish and a cancel that ends a queued session."""
    events: list[EventBase] = []
    if undelivered:
        events.append(SteerUndelivered(sessionId=session_id, offsets=list(undelivered)))
    events.append(SessionCompleted(sessionId=session_id, status=status, outcome=outcome, detail=detail))
    return events
