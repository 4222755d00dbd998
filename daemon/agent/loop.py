"""The agent loop (README's HTTP API, docs/DEVELOPING.md, docs/durability.md): a turn is ask → journal
the reply → run each tool →
journal its result → end the turn (one atomic drain, one checkpoint); repeat.

`run_agent` and `run_turn` are the whole loop and read in one screen; each step below them
is short. Everything they touch comes in on one `Attempt` (daemon/agent/attempt.py) — the
checkpointed state and the attempt's own, the model, the session's bus channel, the tools,
the clock, the event sink — so tests drive it with a scripted model and a fake clock; how
the attempt starts (fresh, resumed, a fork, a turn to finish from the journal) comes with
it as a `Start` (daemon/agent/start.py). An ending (a limit, a cancel, the workflow done,
the worker stopping) is raised once, as `Ended`, by the step that meets it, and caught once,
in `run_agent`. Tools say what they did on their output (a step's text, a move of the
workflow position, a question waiting, a worker stopping). What cuts across the steps — the
fence's checks, metrics, tracing, the crash tests' kill points — runs at the points the
steps pass (`a.hooks.after_model(turn)`, ...): hooks the runner registers on the attempt
(daemon/agent/hooks.py).

The journal (docs/durability.md, daemon/agent/journal.py): the reply is checkpointed before its
first tool starts and each tool's result as the tool ends, so a resumed attempt finishes a
turn whose reply it finds in the journal without asking the model again: journaled results
are reused, the call that may have been running is run again only if that is safe
(`journal.rerunnable`), else answered "effects unknown", and the calls after it run.

Limits are checked before every model call and, while a tool runs, by its watcher (a Bash
that outlives the wall clock or the stall limit is killed then); a cancel cuts the live turn
as an interrupt does (the heartbeat hears it: daemon/turn/interrupt.py `cancel`) and the
next turn's start ends the session `cancelled`.

Delivery, exactly as README's HTTP API says: at each turn end `channel.turn_ended` takes every
pending steer in one Lua step; the next user message is the turn's tool results, then one
text block — the step text (if the turn advanced a step), then each steer in offset order,
joined with "\\n\\n" — and the checkpoint that stores it retires those steers from the
in-flight list in the same atomic step. The `steer_delivered` receipt names the turn that
actually receives them, so it is emitted once that turn has started.

Interrupts (README's Managing steers): an interrupt steer cuts the live turn short (daemon/turn/interrupt.py).
A model call in flight, a retry's backoff or a wait for a model slot is abandoned — nothing
of the call's reply is kept, the turn ends, and its drain takes the steers into the message
that call was answering (`abandon_turn`); during the tools, a running Bash command is
killed and the calls not yet started are skipped (`run_tools`). Either way the next model
call starts at once with the steers.

Fencing (docs/durability.md): every bus call is refused once this attempt is stale, raising `Fenced`
out of the loop; and the fence's check (`channel.guard()`) before each model call (the model
call's own), after it returns and before each tool call (the `Fencing` hook at
`after_model` and `before_tool`: daemon/agent/attempthooks.py) makes sure a worker that was
frozen or cut off past its lease does nothing more (no tool runs on a reply that came back
to a stale attempt).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from daemon.agent.attempt import DEFAULT_CALLS, Attempt, Channel, Ended, Limits, Turn, ended_if, never
from daemon.agent.endings import CANCELLED, RELEASED, Ending, finished
from daemon.agent.journal import effects_unknown, partial_message, rerunnable
from daemon.agent.model import ModelReply
from daemon.agent.replyevents import llm_completed, stuck
from daemon.agent.start import Journaled, Opening, Start, opening
from daemon.agent.turnmark import turn_mark
from daemon.bus.session.steerbus import Cancelled
from daemon.host.clock import Clock
from daemon.schema.endcheckpoint import EndCheckpoint, Store
from daemon.schema.events import SteerDelivered, ToolCallFailed, TurnEnded, TurnInterrupted, TurnStarted
from daemon.schema.records import PendingSteer, SessionStatus
from daemon.tools import ToolContext
from daemon.tools.files import accept_own_write
from daemon.turn.interrupt import Interrupted, skipped_result
from daemon.turn.messages import (
    Message,
    ToolResultBlock,
    ToolUseBlock,
    extend_last_user,
    numbered,
    turn_end_message,
)

IDLE_SLICE_SECONDS = 1.0  # the idle wait blocks in slices so a cancel and a stop are noticed

__all__ = [
    "DEFAULT_CALLS",
    "Attempt",
    "Channel",
    "Limits",
    "idle_wait",
    "limit_reached",
    "never",
    "run_agent",
]


def run_agent(a: Attempt, start: Start) -> Ending:
    """The attempt's turns until an ending, the first as `start` says (daemon/agent/start.py)."""
    try:
        run_turn(a, start)
        while True:
            run_turn(a)
    except Ended as ended:
        return ended.ending
    finally:
        a.hooks.attempt_ended()


def run_turn(a: Attempt, start: Start | None = None) -> None:
    """One turn. An attempt's first opens the history or takes its reply from the journal."""
    check_limits(a)
    turn = begin_turn(a, start)
    try:
        if turn.reply is None:
            ask(a, turn)
    except Interrupted:
        abandon_turn(a, turn.id)
        return
    run_tools(a, turn)
    end_turn(a, turn)


def check_limits(a: Attempt) -> None:
    """Checked before every turn: the session's limits, the worker stopping."""
    now = a.clock.monotonic()
    elapsed = a.own.elapsed_before + now - a.started
    if ending := limit_reached(a.limits, a.s.turns, elapsed, now - a.progress_at):
        raise Ended(ending)
    if a.stop():
        raise Ended(RELEASED)
    a.hooks.before_turn()


def begin_turn(a: Attempt, start: Start | None) -> Turn:
    """Bind the turn (a cancel ends the attempt here), announce it, arm its request's receipts."""
    journaled, opens = (start, None) if isinstance(start, Journaled) else (None, start)
    try:
        turn, received, unsent, started = start_turn(a, opens)
    except Cancelled:
        raise Ended(CANCELLED) from None
    a.events.emit(started, *receipt(a.session_id, turn, received))
    a.ask.calls.before_send = Receipts(a, turn, unsent, received)
    a.hooks.turn_started(turn)
    return Turn.of(turn, journaled)


def ask(a: Attempt, turn: Turn) -> None:
    """The model's reply (compaction, the fleet-wide cap, retries: modelturn.py), journaled
    before any of its tools starts."""
    s = a.s
    with a.hooks.model_call(turn.id):
        reply: ModelReply = ended_if(a.ask(turn.id))
    a.hooks.after_model(turn.id)  # the fence: the reply may have come back to a stale attempt
    message = reply.message()
    a.events.emit(llm_completed(a.session_id, turn.id, reply), *stuck(a.own, turn.id, message))
    commit(a, [message], [])  # the write-ahead reply (docs/durability.md)
    turn.reply, turn.keep = s.history[-1], len(s.history)
    a.hooks.after_reply(turn.id)


def run_tools(a: Attempt, turn: Turn) -> None:
    """The reply's calls without a result, in order; none runs for a stale attempt. Once the
    turn is interrupted, the running one stops (a Bash command is killed) and the rest are
    skipped, each with a tool_result saying so."""
    ctx = tool_context(a, turn)
    interrupt, running, skipped = a.channel.interrupt, None, 0
    for index, use in enumerate(turn.open_uses()):
        if interrupt.is_set:
            turn.results.append(skipped_result(use))
            skipped += 1
            continue
        journal_results(a, turn)  # before the next call starts; the last call's, with the drain
        run_tool(a, turn, use, ctx, maybe_ran=turn.resumed and index == 0)
        if interrupt.is_set:
            running = use.id
    if running or skipped:
        cut = TurnInterrupted(
            sessionId=a.session_id, turnId=turn.id, phase="tools", skipped=skipped, stopped=running
        )
        a.events.emit(cut)


def run_tool(a: Attempt, turn: Turn, use: ToolUseBlock, ctx: ToolContext, maybe_ran: bool) -> None:
    """One call, its result journaled as it ends. `maybe_ran`: the journal's first open call
    of a resumed turn, which may have been running when the last worker died."""
    if maybe_ran and not rerunnable(use):
        result = effects_unknown(use)
        a.events.emit(
            ToolCallFailed(
                sessionId=a.session_id,
                turnId=turn.id,
                toolName=use.name,
                toolUseId=use.id,
                error=result.content,
            )
        )
    else:
        if maybe_ran and use.name == "Write":
            accept_own_write(use.input, ctx)  # the same content written again is the same Write
        result = call_tool(a, turn, use, ctx)
    a.hooks.after_tool(turn.id, use)
    turn.results.append(result)


def call_tool(a: Attempt, turn: Turn, use: ToolUseBlock, ctx: ToolContext) -> ToolResultBlock:
    """Run the call (after the fence's check); the turn takes what the tool says it did."""
    a.hooks.before_tool(turn.id, use)  # the fence: no tool runs for a stale attempt
    ctx.awaiting = turn.awaiting
    with a.hooks.tool_call(turn.id, use):
        ran = a.tools.call(use, ctx)
    a.hooks.tool_done(turn.id, use, ran.result)
    if ran.output.released:  # the worker is stopping (spawn_agent's wait): resumed elsewhere
        raise Ended(RELEASED)
    turn.took(use, ran.output, a.s.cursor)
    return ran.result


def journal_results(a: Attempt, turn: Turn) -> None:
    """The turn's results so far, in place of the last such entry (docs/durability.md); nothing
    when the journal holds them all."""
    if turn.journaled == len(turn.results):
        return
    del a.s.history[turn.keep :]
    commit(a, [partial_message(turn.results, turn.step_texts, turn.awaiting)], [])
    turn.journaled = len(turn.results)


def end_turn(a: Attempt, turn: Turn) -> None:
    """The drain, which stores the turn's user message (results, steps) in the same step when
    no steer comes to join it; else that message with the steers replaces the journal's
    partial one, or the session waits first (a question's reply, or any steer), or it is done."""
    s = a.s
    done = s.cursor.complete or s.cursor.ended_fatal
    steers, stored = drain(a, turn, done)
    if done:  # its user message is stored: the steers drained now are left for the finish
        raise Ended(finished(s.cursor))
    if turn.awaiting is not None:  # signal_coordinator(wait=true): the next steer is its result
        answered, steers = await_reply(a, turn, steers)
        commit(a, present([turn_end_message(answered, turn.step_texts, [])]), steers)
        return
    if not stored:
        message, steers = delivery(a, turn, steers)
        commit(a, present([message]), steers)
    a.hooks.after_checkpoint(turn.id)


def drain(a: Attempt, turn: Turn, done: bool = False) -> tuple[list[PendingSteer], bool]:
    """End the live turn: take every pending steer (one Lua step) and, in it, store the turn's
    user message when those steers cannot change it (True then); announce the end."""
    s, results = a.s, turn.results
    parked = not results or turn.awaiting is not None
    if a.own.snapshot is not None:
        journal_results(a, turn)  # the snapshot is a side effect: the results are journaled first
    mark = turn_mark(a, turn)  # what a fork from this turn needs, written with the drain
    end, kept = ending(a, turn, done)
    steers = a.channel.turn_ended(SessionStatus.WAITING if parked else SessionStatus.RUNNING, mark, end)
    stored = end is not None and end.stored(len(steers))
    a.hooks.after_drain(turn.id)
    a.events.emit(TurnEnded(sessionId=a.session_id, turnId=turn.id, toolCalls=len(results)))
    if turn.step_texts or steers or any(not result.is_error for result in results):
        a.progressed()
    del s.history[turn.keep :]  # the journal's partial message: the turn's whole one replaces it
    if stored:
        s.history.extend(kept)
    return steers, stored


def ending(a: Attempt, turn: Turn, done: bool) -> tuple[EndCheckpoint | None, list[Message]]:
    """What the drain stores (daemon/schema/endcheckpoint.py): once the workflow is done, the
    turn's results whatever it takes; a turn that goes on, its results and step texts unless
    a steer comes. None when the message waits on a steer anyway (a question, an idle turn)."""
    if not done and (not turn.results or turn.awaiting is not None):
        return None, []
    receiving = a.s.turns + 1  # the next turn reads them (`commit`)
    message = turn_end_message(turn.results, [] if done else turn.step_texts, [])
    kept = [numbered(m, receiving, []) for m in present([message])]
    partial = ""  # the last call's result, journaled by the drain when steers come
    if turn.journaled < len(turn.results):
        partial = numbered(
            partial_message(turn.results, turn.step_texts, turn.awaiting), receiving, []
        ).to_json()
    store = Store.ALWAYS if done else Store.IF_NO_STEERS
    return EndCheckpoint(store, turn.keep, [m.to_json() for m in kept], partial, a.s.fields()), kept


def delivery(a: Attempt, turn: Turn, steers: list[PendingSteer]) -> tuple[Message | None, list[PendingSteer]]:
    """The turn's user message (README's HTTP API); a turn without a tool call first waits for a steer."""
    cursor = a.s.cursor
    if not turn.results and not steers:
        steers = ended_if(idle_wait(a.channel, a.limits.idle_wait_seconds, a.stop))
        a.progressed()
        return turn_end_message([], cursor.release_held(), [steer.text for steer in steers]), steers
    # A step held back for a confirmation (gates: steer) comes with the first steer.
    step_texts = [*turn.step_texts, *(cursor.release_held() if steers else [])]
    return turn_end_message(turn.results, step_texts, [steer.text for steer in steers]), steers


def present(messages: Sequence[Message | None]) -> list[Message]:
    return [message for message in messages if message is not None]


def tool_context(a: Attempt, turn: Turn) -> ToolContext:
    own = a.own
    return ToolContext(
        own.session_id,
        turn.id,
        own.workspace,
        a.s.cursor,
        a.events,
        own.issues,
        interrupt=a.channel.interrupt,
        guard=a.channel.guard,
        lease_left=a.channel.lease_left,
        halt=halting(a.limits, a.clock, own.elapsed_before - a.started, a.progress_at, a.channel),
        coordinator=own.coordinator,
        files=a.s.files,
        read_only=own.read_only,
    )


def halting(
    limits: Limits, clock: Clock, elapsed_offset: float, progress_at: float, channel: Channel
) -> Callable[[], str | None]:
    """What a running tool's watcher polls (docs/durability.md): the wall clock and the stall limit
    running out (the session's elapsed time is `elapsed_offset` + the clock), the fence."""

    def halt() -> str | None:
        now = clock.monotonic()
        ending = limit_reached(limits, 0, elapsed_offset + now, now - progress_at)
        return ending.outcome if ending is not None else channel.halted()

    return halt


def abandon_turn(a: Attempt, turn: int) -> None:
    """The turn's model call was abandoned for an interrupt steer (README's Managing steers): nothing of
    its reply is kept. The turn ends; its drain takes the steers, which join the message
    the abandoned call was answering, so the next call (at once) carries them."""
    s = a.s
    a.events.emit(TurnInterrupted(sessionId=a.session_id, turnId=turn, phase="model"))
    steers = a.channel.turn_ended(SessionStatus.RUNNING)
    a.events.emit(TurnEnded(sessionId=a.session_id, turnId=turn, toolCalls=0))
    if steers:
        held = s.cursor.release_held()
        keep, message = extend_last_user(s.history, held, [steer.text for steer in steers])
        del s.history[keep:]
        commit(a, [message], steers)
        a.progressed()


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


def start_turn(a: Attempt, opens: Opening | None) -> tuple[int, list[int], list[int], TurnStarted]:
    """Bind the live turn; returns it with the offsets of the steers its request carries:
    those already journalled delivered to it (a turn bound again), and those journalled when
    its request leaves (`Receipts`); and its `turn_started`, which the script that binds it
    may have appended already (the channel's `announcing`: the emit skips it then).

    An attempt's first turn (unless journaled) also takes, in the same atomic step, every
    steer not yet delivered, and writes its opening message (first step prompt, resume note,
    a fork's turn end; then those steers): a steer accepted any time before the attempt's
    first turn starts reaches it."""
    s = a.s
    announce = TurnStarted(sessionId=a.session_id, turnId=s.turns + 1)
    started = a.channel.start_turn(s.turns + 1, drain=opens is not None, announce=announce)
    s.turns = started.turn
    event = (
        announce if started.turn == announce.turnId else TurnStarted(sessionId=a.session_id, turnId=s.turns)
    )
    if opens is None:
        return started.turn, started.receipted, started.unsent, event
    keep, message = opening(opens, s.history, s.cursor, [steer.text for steer in started.steers])
    del s.history[keep:]
    commit(a, [message], started.steers, receiving_turn=started.turn)
    unsent = [*started.unsent, *(steer.offset for steer in started.steers)]
    return started.turn, started.receipted, unsent, event


class Receipts:
    """What runs right before the turn's first request leaves, after the fence's last check
    (daemon/agent/sendguard.py): the steers the request carries are journalled delivered to
    THIS turn and their receipt emitted (docs/durability.md) — a turn bound but never sent (a kill
    in between) is not named; the attempt that sends them is."""

    def __init__(self, a: Attempt, turn: int, unsent: Sequence[int], receipted: Sequence[int]) -> None:
        self.a, self.turn, self.waiting, self.receipted = a, turn, list(unsent), list(receipted)

    def __call__(self) -> None:
        a, turn = self.a, self.turn
        a.hooks.before_send(turn)
        if not self.waiting:
            return
        fresh = [offset for offset in self.waiting if offset not in self.receipted]
        announce = next(iter(receipt(a.session_id, turn, fresh)), None)  # appended by the script, if it can
        journalled = a.channel.request_sent(turn, announce, [*self.receipted, *fresh])
        offsets = [offset for offset in journalled if offset not in self.receipted]
        self.waiting.clear()
        if offsets != fresh:  # not the receipt announced: this one instead
            announce = next(iter(receipt(a.session_id, turn, offsets)), None)
        if announce is not None:
            a.events.emit(announce)


def commit(
    a: Attempt, messages: Sequence[Message], steers: Sequence[PendingSteer], receiving_turn: int | None = None
) -> None:
    """Checkpoint the new messages; the steers they carry leave the in-flight list atomically
    (and wait in the record for the receipt of the turn that receives them)."""
    s = a.s
    a.hooks.steers_checkpointed(steers)
    receiving = receiving_turn or s.turns + 1
    offsets = [steer.offset for steer in steers]
    # README's Console: one turn numbering. A reply is the live turn's; the messages after it
    # are read by the next turn (the one that receives these steers).
    kept = [numbered(m, s.turns if m.role == "assistant" else receiving, offsets) for m in messages]
    a.channel.checkpoint(len(s.history), [m.to_json() for m in kept], offsets, receiving, s.fields())
    s.history.extend(kept)


def receipt(session_id: str, turn: int, offsets: Sequence[int]) -> list[SteerDelivered]:
    """`steer_delivered`: the coordinator's receipt that `turn` received these steers."""
    return [SteerDelivered(sessionId=session_id, turnId=turn, offsets=list(offsets))] if offsets else []


def idle_wait(channel: Channel, seconds: float, stop: Callable[[], bool]) -> list[PendingSteer] | Ending:
    """The agent ended its turn without a tool call: wait for a steer (README's HTTP API, docs/durability.md).

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
    a: Attempt, turn: Turn, steers: list[PendingSteer]
) -> tuple[list[ToolResultBlock], list[PendingSteer]]:
    """A question waits for its answer (README's Sub-agents and questions): the steers this turn end
    drained, else the
    first to arrive (the idle wait, `waitingFor: reply`; a cancel or the idle limit end it
    as for any idle session). They become the waiting call's tool_result, not a text
    block after it, and the checkpoint that stores it journals them delivered, once. A
    resumed attempt that finds the question in the journal waits here the same way."""
    if not steers:
        a.channel.mark_waiting("reply")
    if turn.awaiting_event is not None:  # the question's coordinator_signal, now that it waits
        a.events.emit(turn.awaiting_event)
    if not steers:
        steers = ended_if(idle_wait(a.channel, a.limits.idle_wait_seconds, a.stop))
    a.progressed()
    answer = "\n\n".join(steer.text for steer in steers)
    replaced = [
        ToolResultBlock(tool_use_id=r.tool_use_id, content=f"The coordinator replied:\n\n{answer}")
        if r.tool_use_id == turn.awaiting and not r.is_error
        else r
        for r in turn.results
    ]
    return replaced, steers
