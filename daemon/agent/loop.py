"""The agent loop (SPEC §3.2, §4.1): model call, tools, turn end, one atomic drain, repeat.

`run_agent` is the whole loop and reads in one screen. Everything it touches comes in as
an argument — the model, the session's bus channel, the tools, the clock, the event sink —
so tests drive it with a scripted model and a fake clock. Limits are checked before every
model call and, while a tool runs, by its watcher (a Bash that outlives the wall clock or
the stall limit is killed then); a cancel cuts the live turn as an interrupt does (the
heartbeat hears it: daemon/turn/interrupt.py `cancel`) and the next turn's start ends the
session `cancelled`.

Delivery, exactly as SPEC §3.2 says: at each turn end `channel.turn_ended` takes every
pending steer in one Lua step; the next user message is the turn's tool results, then one
text block — the step text (if the turn advanced a step), then each steer in offset order,
joined with "\\n\\n" — and the checkpoint that stores it retires those steers from the
in-flight list in the same atomic step. The `steer_delivered` receipt names the turn that
actually receives them, so it is emitted once that turn has started.

Interrupts (SPEC §3.7): an interrupt steer cuts the live turn short (daemon/turn/interrupt.py).
A model call in flight, a retry's backoff or a wait for a model slot is abandoned — nothing
of the call's reply is kept, the turn ends, and its drain takes the steers into the message
that call was answering (`abandon_turn`); during the tools, a running Bash command is
killed and the calls not yet started are skipped (`run_tools`). Either way the next model
call starts at once with the steers.

Fencing (SPEC §6): every bus call is refused once this attempt is stale, raising `Fenced`
out of the loop; and `channel.guard()` before each model call, after it returns and before
each tool call makes sure a worker that was frozen or cut off past its lease does nothing
more (no tool runs on a reply that came back to a stale attempt).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from daemon.agent.endings import CANCELLED, RELEASED, Ending
from daemon.agent.model import Model, ModelReply
from daemon.agent.modelcall import CallSettings
from daemon.agent.modelturn import CompactingChannel, ModelTurn
from daemon.agent.state import AgentSession
from daemon.bus.events import (
    AgentStuck,
    LlmTurnCompleted,
    SteerDelivered,
    TurnEnded,
    TurnInterrupted,
    TurnStarted,
    reply_text,
)
from daemon.bus.metrics import NULL_RECORDER, STEER_DELIVERY, TOOL_CALLS, MetricsRecorder
from daemon.bus.records import PendingSteer, SessionStatus
from daemon.bus.steers import Cancelled, Taken, TurnStart
from daemon.host import tracing
from daemon.host.clock import Clock
from daemon.host.faults import crash_point
from daemon.tools import Emitter, Toolbox, ToolContext, WorkflowCursor
from daemon.turn.interrupt import Interrupted, skipped_result
from daemon.turn.messages import (
    Message,
    ToolResultBlock,
    ToolUseBlock,
    extend_last_user,
    tool_signature,
    turn_end_message,
)
from daemon.workflows import WorkflowLimits

IDLE_SLICE_SECONDS = 1.0  # the idle wait blocks in slices so a cancel and a stop are noticed
STUCK_REPEATS = 3  # the same tool calls this many turns in a row: `agent_stuck`
log = logging.getLogger(__name__)

DEFAULT_CALLS = CallSettings()


class Channel(CompactingChannel, Protocol):
    """The worker side of one session on the steer bus (daemon.bus.steers.SessionChannel): the
    model turn's part (heartbeat, mark_waiting, checkpoint: daemon/agent/modelturn.py) and this."""

    def start_turn(self, expected: int | None = None, drain: bool = False) -> TurnStart: ...
    def turn_ended(self, status: SessionStatus = SessionStatus.RUNNING) -> list[PendingSteer]: ...
    def take(self) -> Taken: ...
    def wait_for_steers(self, cursor: str, timeout_seconds: float) -> bool: ...
    def halted(self) -> str | None: ...
    def request_sent(self, turn: int) -> list[int]: ...


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


def run_agent(
    s: AgentSession,
    model: Model,
    channel: Channel,
    tools: Toolbox,
    clock: Clock,
    events: Emitter,
    limits: Limits,
    stop: Callable[[], bool] = never,
    calls: CallSettings = DEFAULT_CALLS,
) -> Ending:
    """The attempt's turns until an ending (the last turn's span closed however it ends)."""
    try:
        return run_turns(s, model, channel, tools, clock, events, limits, stop, calls)
    finally:
        s.turn_span.end()


def run_turns(
    s: AgentSession,
    model: Model,
    channel: Channel,
    tools: Toolbox,
    clock: Clock,
    events: Emitter,
    limits: Limits,
    stop: Callable[[], bool] = never,
    calls: CallSettings = DEFAULT_CALLS,
) -> Ending:
    started = progress_at = clock.monotonic()
    specs = tools.specs()
    ask = ModelTurn(s, model, channel, clock, events, calls, stop, specs)
    while True:
        now = clock.monotonic()
        if ending := limit_reached(limits, s.turns, s.elapsed_before + now - started, now - progress_at):
            return ending
        if stop():
            return RELEASED
        crash_point(s.faults, "before_turn")
        try:
            turn, received, unsent = start_turn(s, channel)
        except Cancelled:
            return CANCELLED
        events.emit(TurnStarted(sessionId=s.session_id, turnId=turn), *receipt(s.session_id, turn, received))
        ask.calls.before_send = sending(s, channel, events, turn, unsent, received)
        s.turn_span.begin({"worktrain.session_id": s.session_id, "worktrain.turn": turn})
        delivered(calls.metrics, s)
        traces, s.carrying_traces = s.carrying_traces, []
        try:
            with tracing.carrying(traces):
                reply = ask(turn)  # compaction, the fleet-wide cap, retries (each call guarded): modelturn.py
        except Interrupted:
            if abandon_turn(s, channel, events, turn):
                progress_at = clock.monotonic()
            continue
        if isinstance(reply, Ending):
            return reply
        channel.guard()  # the reply may have come back to an attempt frozen past its lease
        crash_point(s.faults, "after_model")
        events.emit(llm_completed(s.session_id, turn, reply), *stuck(s, turn, reply.message()))

        ctx = ToolContext(
            s.session_id,
            turn,
            s.workspace,
            s.cursor,
            events,
            s.issues,
            interrupt=channel.interrupt,
            guard=channel.guard,
            halt=halting(limits, clock, s.elapsed_before - started, progress_at, channel),
            coordinator=s.coordinator,
            files=s.files,
            read_only=s.read_only,
        )
        results = run_tools(s, tools, reply.message().tool_uses, ctx, channel, calls.metrics)
        if ctx.released:  # a tool found the worker stopping (spawn_agent's wait): resumed elsewhere
            return RELEASED
        idle = not results
        parked = idle or ctx.reply_to is not None
        steers = channel.turn_ended(SessionStatus.WAITING if parked else SessionStatus.RUNNING)
        crash_point(s.faults, "after_drain")
        events.emit(TurnEnded(sessionId=s.session_id, turnId=turn, toolCalls=len(results)))
        if ctx.step_texts or steers or any(not result.is_error for result in results):
            progress_at = clock.monotonic()
        if s.cursor.complete or s.cursor.ended_fatal:
            closing = [reply.message(), turn_end_message(results, [], [])]
            commit(s, channel, [m for m in closing if m is not None], [])
            return finished(s.cursor)
        if ctx.reply_to is not None:  # signal_coordinator(wait=true): the next steer is its result
            answered = await_reply(channel, ctx, results, steers, limits.idle_wait_seconds, stop)
            if isinstance(answered, Ending):
                return answered
            (results, steers), progress_at = answered, clock.monotonic()
            answer = [reply.message(), turn_end_message(results, ctx.step_texts, [])]
            commit(s, channel, [m for m in answer if m is not None], steers)
            continue
        if idle and not steers:
            commit(s, channel, [reply.message()], [])  # keep the reply while the agent waits
            waited = idle_wait(channel, limits.idle_wait_seconds, stop)
            if isinstance(waited, Ending):
                return waited
            steers, progress_at = waited, clock.monotonic()
            messages = [turn_end_message([], s.cursor.release_held(), [steer.text for steer in steers])]
        else:
            # A step held back for a confirmation (gates: steer) comes with the first steer.
            step_texts = [*ctx.step_texts, *(s.cursor.release_held() if steers else [])]
            messages = [reply.message(), turn_end_message(results, step_texts, [x.text for x in steers])]
        commit(s, channel, [m for m in messages if m is not None], steers)
        crash_point(s.faults, "after_checkpoint")


def run_tools(
    s: AgentSession,
    tools: Toolbox,
    uses: Sequence[ToolUseBlock],
    ctx: ToolContext,
    channel: Channel,
    metrics: MetricsRecorder = NULL_RECORDER,
) -> list[ToolResultBlock]:
    """The turn's tool calls, in order; none runs for a stale attempt. Once the turn is
    interrupted, the one running stops (a Bash command is killed; the other tools are short
    and finish) and the rest are skipped, each with a tool_result saying so."""
    results: list[ToolResultBlock] = []
    running: str | None = None
    skipped = 0
    interrupt = channel.interrupt
    for use in uses:
        if interrupt.is_set:
            results.append(skipped_result(use))
            skipped += 1
            continue
        crash_point(s.faults, "in_tool")
        channel.guard()
        with tracing.span("worktrain.tool", {"worktrain.tool": use.name, "worktrain.turn": ctx.turn_id}):
            result = tools.run(use, ctx)
        results.append(result)
        name = use.name if use.name in tools.tools else "unknown"  # a bounded label set
        metrics.count(TOOL_CALLS, tool=name, result="error" if result.is_error else "ok")
        if interrupt.is_set:
            running = use.id
    if running or skipped:
        cut = TurnInterrupted(
            sessionId=s.session_id, turnId=ctx.turn_id, phase="tools", skipped=skipped, stopped=running
        )
        ctx.events.emit(cut)
    return results


def halting(
    limits: Limits, clock: Clock, elapsed_offset: float, progress_at: float, channel: Channel
) -> Callable[[], str | None]:
    """What a running tool's watcher polls (SPEC §6 v3): the wall clock and the stall limit
    running out (the session's elapsed time is `elapsed_offset` + the clock), the fence."""

    def halt() -> str | None:
        now = clock.monotonic()
        ending = limit_reached(limits, 0, elapsed_offset + now, now - progress_at)
        return ending.outcome if ending is not None else channel.halted()

    return halt


def abandon_turn(s: AgentSession, channel: Channel, events: Emitter, turn: int) -> list[PendingSteer]:
    """The turn's model call was abandoned for an interrupt steer (SPEC §3.7): nothing of
    its reply is kept. The turn ends; its drain takes the steers, which join the message
    the abandoned call was answering, so the next call (at once) carries them."""
    events.emit(TurnInterrupted(sessionId=s.session_id, turnId=turn, phase="model"))
    steers = channel.turn_ended(SessionStatus.RUNNING)
    events.emit(TurnEnded(sessionId=s.session_id, turnId=turn, toolCalls=0))
    if steers:
        held = s.cursor.release_held()
        keep, message = extend_last_user(s.history, held, [steer.text for steer in steers])
        del s.history[keep:]
        commit(s, channel, [message], steers)
    return steers


def limit_reached(limits: Limits, turns: int, elapsed: float, since_progress: float) -> Ending | None:
    """Checked before every model call. Progress: a tool call that worked, a step, a steer."""
    if turns >= limits.max_turns:
        return Ending(SessionStatus.FAILED, "max_turns", f"reached the limit of {limits.max_turns} turns")
    if elapsed >= limits.max_wall_clock_seconds:
        detail = f"ran for {elapsed:.0f}s, the limit is {limits.max_wall_clock_seconds:.0f}s"
        return Ending(SessionStatus.FAILED, "max_wall_clock", detail)
    if since_progress >= limits.stall_seconds:
        detail = f"no progress (no successful tool call, step or steer) for {since_progress:.0f}s"
        return Ending(SessionStatus.FAILED, "stalled", detail)
    return None


def start_turn(s: AgentSession, channel: Channel) -> tuple[int, list[int], list[int]]:
    """Bind the live turn; returns it with the offsets of the steers its request carries:
    those already journalled delivered to it (a turn bound again), and those journalled when
    its request leaves (`sending`).

    An attempt's first turn also takes, in the same atomic step, every steer not yet
    delivered, and writes its opening message (first step prompt or resume note, then those
    steers): a steer accepted any time before turn 1 starts reaches turn 1."""
    opening = s.opening
    started = channel.start_turn(s.turns + 1, drain=opening is not None)
    s.turns = started.turn
    if opening is None:
        return started.turn, started.receipted, started.unsent
    keep, message = opening([steer.text for steer in started.steers])
    s.opening = None
    del s.history[keep:]
    commit(s, channel, [message], started.steers, receiving_turn=started.turn)
    return started.turn, started.receipted, [*started.unsent, *(steer.offset for steer in started.steers)]


def sending(
    s: AgentSession,
    channel: Channel,
    events: Emitter,
    turn: int,
    unsent: Sequence[int],
    receipted: Sequence[int],
) -> Callable[[], None]:
    """What runs right before the turn's first request leaves, after the fence's last check
    (daemon/agent/sendguard.py): the steers the request carries are journalled delivered to
    THIS turn and their receipt emitted (SPEC §6 v3) — a turn bound but never sent (a kill
    in between) is not named; the attempt that sends them is."""
    waiting = list(unsent)

    def before_send() -> None:
        crash_point(s.faults, "before_send")
        if not waiting:
            return
        offsets = [offset for offset in channel.request_sent(turn) if offset not in receipted]
        waiting.clear()
        events.emit(*receipt(s.session_id, turn, offsets))

    return before_send


def commit(
    s: AgentSession,
    channel: Channel,
    messages: Sequence[Message],
    steers: Sequence[PendingSteer],
    receiving_turn: int | None = None,
) -> None:
    """Checkpoint the new messages; the steers they carry leave the in-flight list atomically
    (and wait in the record for the receipt of the turn that receives them)."""
    s.carrying.extend(steer.acceptedAt for steer in steers)
    s.carrying_traces.extend(steer.traceparent for steer in steers if steer.traceparent)
    channel.checkpoint(
        len(s.history),
        [m.to_json() for m in messages],
        [steer.offset for steer in steers],
        receiving_turn or s.turns + 1,
        s.fields(),
    )
    s.history.extend(messages)


def delivered(metrics: MetricsRecorder, s: AgentSession) -> None:
    """The steers the coming model request carries: their accept-to-request latency."""
    if not s.carrying:
        return
    now = datetime.now(UTC)
    for accepted_at in s.carrying:
        try:
            accepted = datetime.fromisoformat(accepted_at.replace("Z", "+00:00"))
        except ValueError:
            log.warning("steer acceptedAt %r is not a time; its delivery is not measured", accepted_at)
            continue
        metrics.observe(STEER_DELIVERY, (now - accepted).total_seconds())
    s.carrying.clear()


def receipt(session_id: str, turn: int, offsets: Sequence[int]) -> list[SteerDelivered]:
    """`steer_delivered`: the coordinator's receipt that `turn` received these steers."""
    return [SteerDelivered(sessionId=session_id, turnId=turn, offsets=list(offsets))] if offsets else []


def idle_wait(channel: Channel, seconds: float, stop: Callable[[], bool]) -> list[PendingSteer] | Ending:
    """The agent ended its turn without a tool call: wait for a steer (SPEC §3.2, §6).

    A fenced, non-blocking take (`channel.take`: pending steers move in flight, and every
    steer in flight is answered), then a read-only block on the session's journal after the
    take's cursor (`wait_for_steers`: XREAD), which wakes as soon as a steer is accepted. In
    slices, so that a cancel, a stop and a refused attempt are noticed: between slices the
    heartbeat renews the lease and reports the cancel flag and the steers waiting, so steers
    some lost reply left in flight wake the wait as well as new ones. Every call in it is
    safe to repeat, so no retry can strand a steer.
    """
    remaining = seconds
    taken = channel.take()
    while True:
        if taken.steers:
            return taken.steers
        if taken.cancel_requested:
            return CANCELLED
        if stop():
            return RELEASED
        if remaining <= 0:
            detail = f"the agent stopped without finishing the workflow; no steer came in {seconds:.0f}s"
            return Ending(SessionStatus.FAILED, "incomplete", detail)
        block = min(IDLE_SLICE_SECONDS, remaining)
        remaining -= block
        if channel.wait_for_steers(taken.cursor, block):
            taken = channel.take()
            continue
        check = channel.heartbeat()  # one round trip: the lease, a cancel, steers in flight
        if check.cancel_requested:
            return CANCELLED
        if check.steers:
            taken = channel.take()


def await_reply(
    channel: Channel,
    ctx: ToolContext,
    results: list[ToolResultBlock],
    steers: list[PendingSteer],
    seconds: float,
    stop: Callable[[], bool],
) -> tuple[list[ToolResultBlock], list[PendingSteer]] | Ending:
    """A question waits for its answer (SPEC §3.8): the steers this turn end drained, else the
    first to arrive (the idle wait, `waitingFor: reply`; a cancel or the idle limit end it
    as for any idle session). They become the waiting call's tool_result, not a text
    block after it, and the checkpoint that stores it journals them delivered, once."""
    if not steers:
        channel.mark_waiting("reply")
    if ctx.reply_event is not None:  # the question's coordinator_signal, now that it waits
        ctx.events.emit(ctx.reply_event)
    if not steers:
        waited = idle_wait(channel, seconds, stop)
        if isinstance(waited, Ending):
            return waited
        steers = waited
    answer = "\n\n".join(steer.text for steer in steers)
    replaced = [
        ToolResultBlock(tool_use_id=r.tool_use_id, content=f"The coordinator replied:\n\n{answer}")
        if r.tool_use_id == ctx.reply_to and not r.is_error
        else r
        for r in results
    ]
    return replaced, steers


def finished(cursor: WorkflowCursor) -> Ending:
    if cursor.ended_fatal:
        return Ending(SessionStatus.FAILED, "fatal_issue", "the agent reported a fatal issue")
    return Ending(SessionStatus.COMPLETED, "workflow_complete", "all steps completed")


def llm_completed(session_id: str, turn: int, reply: ModelReply) -> LlmTurnCompleted:
    return LlmTurnCompleted(
        sessionId=session_id,
        turnId=turn,
        stopReason=reply.stop_reason,
        inputTokens=reply.usage.input_tokens,
        outputTokens=reply.usage.output_tokens,
        cacheReadTokens=reply.usage.cache_read_tokens,
        cacheWriteTokens=reply.usage.cache_write_tokens,
        text=reply_text(reply.message().texts),
    )


def stuck(s: AgentSession, turn: int, message: Message) -> list[AgentStuck]:
    """`agent_stuck` when the agent asks for the same tool calls STUCK_REPEATS turns in a row."""
    signature = tool_signature(message)
    s.repeats = s.repeats + 1 if signature and signature == s.signature else 1
    s.signature = signature
    if s.repeats != STUCK_REPEATS:
        return []
    reason = f"the same tool calls {STUCK_REPEATS} turns in a row: {', '.join(n for n, _ in signature)}"
    return [AgentStuck(sessionId=s.session_id, turnId=turn, reason=reason)]
