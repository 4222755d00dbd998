"""Tools as typed functions (README's Coding sessions): a pydantic input model, a function, a description.

`Toolbox.run` is the one place a tool call becomes a `tool_result`: an unknown tool, input
that fails validation, a `ToolError` and any other exception a tool raises all come back
to the model as an `is_error` result — a tool call never crashes the session. Except the
fence's: `ToolContext.guard` is checked right after `tool_call_started` is written and again
by a tool right before its side effect (docs/durability.md); its `Fenced` stops the attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from daemon.bus.session.fencing import Fenced, LeaseUnconfirmed
from daemon.schema.events import EventBase, ToolCallCompleted, ToolCallFailed, ToolCallStarted, input_summary
from daemon.tools.coordination import Coordinator
from daemon.tools.ledger import FileLedger
from daemon.turn.interrupt import TurnInterrupt
from daemon.turn.messages import ToolResultBlock, ToolUseBlock
from daemon.workflows import CompiledWorkflow, Workflow, compile_workflow, engine
from daemon.workflows.engine import EngineState
from daemon.workflows.render import Presented

log = logging.getLogger(__name__)

In = TypeVar("In", bound=BaseModel)
Gates = Literal["skip", "steer"]


class Emitter(Protocol):
    """Where events go (daemon.bus.streams.eventsink.EventSink in production, a list in tests)."""

    def emit(self, *events: EventBase) -> None: ...


class IssueRecorder(Protocol):
    def record(self, issue: Any) -> Any: ...


class ToolError(Exception):
    """An expected failure, reported to the model as an error result with this message."""


@dataclass
class WorkflowCursor:
    """Where the session is in its workflow: the engine's state, held by the daemon (the
    model never sees a token), checkpointed in the session record with every turn.

    `gates` is the dispatch's (docs/workflows.md): with "steer", a step whose `requireConfirmation`
    holds waits for a steer once completed; the next step's text is held back meanwhile
    (`awaiting_confirmation`) and delivered with that steer (`release_held`)."""

    workflow: CompiledWorkflow | Workflow
    state: EngineState | None = None  # None: a fresh start with an empty context
    gates: Gates = "skip"
    fatal_issue: bool = False  # a fatal issue was reported: the next continue_workflow ends it
    ended_fatal: bool = False  # ... and it was called
    awaiting_confirmation: bool = False
    _shown: tuple[EngineState, Presented | None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.workflow, Workflow):  # a bare definition (tests): no routines
            self.workflow = compile_workflow(self.workflow)
        if self.state is None:
            self.state = engine.start(self.program, {})

    @classmethod
    def restore(
        cls,
        program: CompiledWorkflow,
        saved: str | None,
        context: dict[str, Any],
        gates: Gates = "skip",
        fatal_issue: bool = False,
    ) -> WorkflowCursor:
        """From the record's `workflowState` (None: a fresh session, started with `context`)."""
        if not saved:
            return cls(program, engine.start(program, context), gates, fatal_issue)
        stored = SavedCursor.model_validate_json(saved)
        return cls(
            program, stored.engine, gates, fatal_issue, awaiting_confirmation=stored.awaitingConfirmation
        )

    @property
    def program(self) -> CompiledWorkflow:
        assert isinstance(self.workflow, CompiledWorkflow)
        return self.workflow

    @property
    def engine_state(self) -> EngineState:
        assert self.state is not None
        return self.state

    @property
    def current(self) -> Presented | None:
        """The pending step as the agent sees it (rendered once per state)."""
        if self._shown is None or self._shown[0] is not self.state:
            self._shown = (self.engine_state, engine.present(self.program, self.engine_state))
        return self._shown[1]

    @property
    def current_prompt(self) -> str | None:
        """The current step's rendered prompt (kept verbatim by compaction, docs/DEVELOPING.md)."""
        step = self.current
        return step.prompt if step else None

    @property
    def complete(self) -> bool:
        return self.engine_state.complete and not self.awaiting_confirmation

    @property
    def step_count(self) -> int:
        return self.program.step_count

    @property
    def index(self) -> int:
        """The current step's position in the workflow's step list (step_count when done)."""
        pending = self.engine_state.pending
        return self.program.index_of(pending.stepId if pending else None)

    def apply(self, change: CursorChange | None) -> None:
        """Take what a tool said it did to the position (the loop calls it after the tool)."""
        if change is None:
            return
        if change.state is not None:
            self.state = change.state
        if change.awaiting_confirmation is not None:
            self.awaiting_confirmation = change.awaiting_confirmation
        self.fatal_issue = self.fatal_issue or change.fatal_issue
        self.ended_fatal = self.ended_fatal or change.ended_fatal

    def changed(self, change: CursorChange) -> WorkflowCursor:
        """A copy of this cursor with `change` taken (what a tool reads its answer from)."""
        after = replace(self)
        after.apply(change)
        return after

    def release_held(self) -> list[str]:
        """The step text held back while a confirmation was awaited (now released), if any."""
        if not self.awaiting_confirmation:
            return []
        self.awaiting_confirmation = False
        step = self.current
        return [step.prompt if step else CONFIRMED_LAST_STEP]

    def fields(self) -> dict[str, str | int]:
        """The session-record fields that show the position (written by each checkpoint)."""
        step = self.current
        saved = SavedCursor(engine=self.engine_state, awaitingConfirmation=self.awaiting_confirmation)
        return {
            "stepId": step.step_id if step else "",
            "stepTitle": step.title if step else "",
            "stepIndex": self.index,
            "stepCount": self.step_count,
            "fatalIssue": int(self.fatal_issue),
            "waitingFor": "confirmation" if self.awaiting_confirmation else "",
            "workflowState": saved.model_dump_json(),
        }


@dataclass(frozen=True)
class CursorChange:
    """What a tool did to the workflow position (continue_workflow, report_issue): reported on
    its output and applied by the loop (`WorkflowCursor.apply`), never written by the tool."""

    state: EngineState | None = None  # continue_workflow advanced: the engine's new state
    awaiting_confirmation: bool | None = None  # ... to a step that waits for a confirmation (or not)
    fatal_issue: bool = False  # report_issue(severity=fatal): the next continue_workflow ends it
    ended_fatal: bool = False  # continue_workflow after a fatal issue: the session ends


class SavedCursor(BaseModel):
    """The record field `workflowState`: the engine's state and the gate."""

    engine: EngineState
    awaitingConfirmation: bool = False


CONFIRMED_LAST_STEP = (
    "[WorkTrain] That was the workflow's last step. Act on the coordinator's reply above if it asks for "
    "anything, then call continue_workflow once more to finish."
)


@dataclass
class ToolContext:
    """What a tool may touch during one turn."""

    session_id: str
    turn_id: int
    workspace: Path
    cursor: WorkflowCursor
    events: Emitter
    issues: IssueRecorder
    interrupt: TurnInterrupt | None = (
        None  # a long-running tool stops when it is set (README's Managing steers)
    )
    # docs/durability.md: the attempt's fence check, made right before a side effect starts (a
    # process spawn, a file write): raises Fenced / LeaseUnconfirmed, which no tool catches
    guard: Callable[[], None] = field(default=lambda: None)
    # Seconds left of the attempt's lease, as the fence counts them (None: no lease to keep):
    # a process the tool spawns must start inside them, or not at all (daemon/sandbox/launch.py)
    lease_left: Callable[[], float | None] = field(default=lambda: None)
    # Why a running tool must stop now (the fence refused, the lease deadline passed, a
    # session limit ran out), or None: polled by a running Bash command's watcher
    halt: Callable[[], str | None] = field(default=lambda: None)
    # signal_coordinator and spawn_agent (README's Sub-agents and questions): the session that carries
    # them out
    coordinator: Coordinator | None = None
    tool_use_id: str = ""  # the call being run (set by Toolbox.run)
    # the turn's signal_coordinator call already waiting for a reply (set by the loop, read by
    # the tool: only one per turn waits); tools report what they did on their ToolOutput
    awaiting: str | None = None
    # What the session has read (Write/Edit refuse a file changed since): the session's, across turns
    files: FileLedger = field(default_factory=FileLedger)
    read_only: bool = False  # branchStrategy read-only (README's Coding sessions): Write and Edit refuse


@dataclass(frozen=True)
class ToolOutput:
    """A tool's answer, and what it did that the loop acts on (a tool never writes the loop's
    state: it says so here, and the loop reads it off the result)."""

    text: str
    is_error: bool = False
    step_text: str | None = None  # continue_workflow advanced: the next step's prompt (README's HTTP API)
    # signal_coordinator(wait=true): its coordinator_signal, emitted once the session is parked;
    # the next steer is this call's result (README's Sub-agents and questions)
    awaits_reply: EventBase | None = None
    released: bool = False  # the worker is stopping (spawn_agent's wait): the turn is abandoned
    cursor: CursorChange | None = None  # what it did to the workflow position


@dataclass(frozen=True)
class ToolRun:
    """One tool call done: the tool_result the model gets, and the tool's own output."""

    result: ToolResultBlock
    output: ToolOutput


@dataclass(frozen=True)
class Tool(Generic[In]):
    name: str
    description: str
    input_model: type[In]
    function: Callable[[In, ToolContext], ToolOutput]

    def spec(self) -> dict[str, Any]:
        """The Messages API tool definition."""
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return {"name": self.name, "description": self.description, "input_schema": schema}

    def call(self, raw_input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        try:
            args = self.input_model.model_validate(raw_input)
        except ValidationError as exc:
            return ToolOutput(f"Invalid input for {self.name}: {describe_errors(exc)}", is_error=True)
        return self.function(args, ctx)


def describe_errors(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:10]:
        where = ".".join(str(p) for p in error["loc"]) or "input"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


RESULT_SUMMARY_CHARS = 1024  # tool_call_completed's resultSummary: enough to see what came back


def result_summary(text: str) -> str:
    """A tool result's first RESULT_SUMMARY_CHARS characters, the cut said."""
    if len(text) <= RESULT_SUMMARY_CHARS:
        return text
    return f"{text[:RESULT_SUMMARY_CHARS]}… [{len(text) - RESULT_SUMMARY_CHARS} more characters]"


class Toolbox:
    """The tools of a session, in the order the model sees them."""

    def __init__(self, tools: Sequence[Tool[Any]]) -> None:
        self.tools: dict[str, Tool[Any]] = {tool.name: tool for tool in tools}

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self.tools.values()]

    def run(self, use: ToolUseBlock, ctx: ToolContext) -> ToolResultBlock:
        """Run one tool call; emits tool_call_started and tool_call_completed or _failed."""
        return self.call(use, ctx).result

    def call(self, use: ToolUseBlock, ctx: ToolContext) -> ToolRun:
        """`run`, with the tool's output (what it did) beside its tool_result."""
        ctx.events.emit(
            ToolCallStarted(
                sessionId=ctx.session_id,
                turnId=ctx.turn_id,
                toolName=use.name,
                toolUseId=use.id,
                inputSummary=input_summary(use.input),
            )
        )
        ctx.guard()  # the event write may have waited out a partition: check again (docs/durability.md)
        started = time.monotonic()
        ctx.tool_use_id = use.id
        output = self._output(use, ctx)
        if output.is_error:
            event: EventBase = ToolCallFailed(
                sessionId=ctx.session_id,
                turnId=ctx.turn_id,
                toolName=use.name,
                toolUseId=use.id,
                error=output.text[:500],
            )
        else:
            event = ToolCallCompleted(
                sessionId=ctx.session_id,
                turnId=ctx.turn_id,
                toolName=use.name,
                toolUseId=use.id,
                durationMs=int((time.monotonic() - started) * 1000),
                resultSummary=result_summary(output.text),
            )
        ctx.events.emit(event)
        return ToolRun(
            ToolResultBlock(tool_use_id=use.id, content=output.text, is_error=output.is_error), output
        )

    def _output(self, use: ToolUseBlock, ctx: ToolContext) -> ToolOutput:
        tool = self.tools.get(use.name)
        if tool is None:
            known = ", ".join(self.tools)
            return ToolOutput(f"Unknown tool {use.name!r}. Available tools: {known}.", is_error=True)
        try:
            return tool.call(use.input, ctx)
        except (Fenced, LeaseUnconfirmed):
            raise  # the attempt stops: not a tool error for the model
        except ToolError as exc:
            return ToolOutput(str(exc), is_error=True)
        except Exception as exc:
            log.exception("tool %s raised", use.name)
            return ToolOutput(f"{use.name} failed: {type(exc).__name__}: {exc}", is_error=True)
