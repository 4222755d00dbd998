"""What the loop (daemon/agent/loop.py) works with: one `Attempt` (instead of nine parameters),
with the `Hooks` that carry the concerns that cut across every step (daemon/agent/hooks.py:
the fence's checks, metrics, tracing, crash points), and the `Turn` it is on, so the steps
themselves say only what a turn does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from daemon.agent.endings import Ending
from daemon.agent.hooks import Hooks
from daemon.agent.journal import Journaled
from daemon.agent.model import Model
from daemon.agent.modelcall import CallSettings
from daemon.agent.modelturn import CompactingChannel, ModelTurn
from daemon.agent.state import AttemptState, SessionState
from daemon.bus.session.steerbus import Taken, TurnStart
from daemon.host.clock import Clock
from daemon.schema.endcheckpoint import EndCheckpoint
from daemon.schema.events import EventBase
from daemon.schema.records import PendingSteer, SessionStatus
from daemon.schema.turnmarks import TurnMark
from daemon.tools import Emitter, Toolbox, ToolOutput, WorkflowCursor
from daemon.turn.messages import Message, ToolResultBlock, ToolUseBlock
from daemon.workflows import WorkflowLimits


class Channel(CompactingChannel, Protocol):
    """The worker side of one session on the steer bus (daemon.bus.session.steerbus.SessionChannel): the
    model turn's part (heartbeat, mark_waiting, checkpoint: daemon/agent/modelturn.py) and this."""

    def start_turn(
        self, expected: int | None = None, drain: bool = False, announce: EventBase | None = None
    ) -> TurnStart: ...
    def turn_ended(
        self,
        status: SessionStatus = SessionStatus.RUNNING,
        mark: TurnMark | None = None,
        end: EndCheckpoint | None = None,
    ) -> list[PendingSteer]: ...
    def take(self) -> Taken: ...
    def wait_for_steers(self, cursor: str, timeout_seconds: float) -> bool: ...
    def halted(self) -> str | None: ...
    def lease_left(self) -> float | None: ...
    def request_sent(
        self, turn: int, announce: EventBase | None = None, expected: Sequence[int] = ()
    ) -> list[int]: ...


@dataclass(frozen=True)
class Limits:
    max_turns: int = 200
    max_wall_clock_seconds: float = 3600.0
    stall_seconds: float = 120.0
    idle_wait_seconds: float = 120.0

    @classmethod
    def of(cls, workflow: WorkflowLimits, idle_wait_seconds: float) -> Limits:
        return cls(workflow.maxTurns, workflow.maxWallClockSeconds, workflow.stallSeconds, idle_wait_seconds)


def never() -> bool:
    return False


DEFAULT_CALLS = CallSettings()


@dataclass
class Attempt:
    """One attempt at a session: what every step of the loop reads (built by the runner)."""

    s: SessionState  # what a checkpoint stores
    own: AttemptState  # the attempt's own, never checkpointed
    model: Model
    channel: Channel
    tools: Toolbox
    clock: Clock
    events: Emitter
    limits: Limits
    stop: Callable[[], bool] = never
    calls: CallSettings = DEFAULT_CALLS
    # fencing, metrics, tracing, crash points: around the loop's points (registered by the runner)
    hooks: Hooks = field(default_factory=Hooks)
    started: float = field(init=False)  # this attempt's start, on the monotonic clock
    progress_at: float = field(init=False)  # the last progress (the stall limit counts from it)
    ask: ModelTurn = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.progress_at = self.clock.monotonic()
        self.ask = ModelTurn(
            self.s,
            self.own,
            self.model,
            self.channel,
            self.clock,
            self.events,
            self.calls,
            self.stop,
            self.tools.specs(),
        )

    @property
    def session_id(self) -> str:
        return self.own.session_id

    def progressed(self) -> None:
        self.progress_at = self.clock.monotonic()


@dataclass
class Turn:
    """The turn being run: its reply once received (or read from the journal), its tools'
    results and what they did, and whether a resumed attempt took it from the journal."""

    id: int
    reply: Message | None = None
    keep: int = 0  # history entries before the turn's user message (up to the reply)
    results: list[ToolResultBlock] = field(default_factory=list)
    journaled: int = 0  # of the results, how many the journal holds (docs/durability.md)
    step_texts: list[str] = field(default_factory=list)
    awaiting: str | None = None  # the signal_coordinator call waiting for the coordinator's reply
    awaiting_event: EventBase | None = None  # its coordinator_signal, emitted once parked
    resumed: bool = False  # the reply came from the journal (docs/durability.md)

    @classmethod
    def of(cls, turn: int, journaled: Journaled | None) -> Turn:
        if journaled is None:
            return cls(turn)
        return cls(
            turn,
            journaled.reply,
            journaled.keep,
            list(journaled.results),
            len(journaled.results),
            list(journaled.step_texts),
            journaled.awaiting,
            resumed=True,
        )

    def took(self, use: ToolUseBlock, output: ToolOutput, cursor: WorkflowCursor) -> None:
        """What a tool said it did: the workflow position it moved, the next step's text, a
        question waiting for its reply."""
        cursor.apply(output.cursor)
        if output.step_text:
            self.step_texts.append(output.step_text)
        if output.awaits_reply is not None:
            self.awaiting, self.awaiting_event = use.id, output.awaits_reply

    def answered(self, use: ToolUseBlock) -> bool:
        return any(result.tool_use_id == use.id for result in self.results)

    def open_uses(self) -> Sequence[ToolUseBlock]:
        """The reply's tool calls without a result yet, in order."""
        assert self.reply is not None
        return [use for use in self.reply.tool_uses if not self.answered(use)]


class Ended(Exception):
    """The attempt's ending, raised once by the step that meets it and caught once (run_agent)."""

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.outcome)
        self.ending = ending


T = TypeVar("T")


def ended_if(value: T | Ending) -> T:
    """`value`, or raise the ending it is."""
    if isinstance(value, Ending):
        raise Ended(value)
    return value
