"""One attempt at one session, around the loop: claim, set up, run, finish (README's HTTP API,
docs/durability.md).

`run_session` is what the RQ job calls. It claims the session (a second job for a session
another worker holds leaves it alone), checks the workspace exists on this host, builds the
system prompt, opens the history — fresh, or resumed from the last checkpoint — runs the
agent loop, and ends the session: `finish` on the bus (leftover steers journalled as
undelivered), `steer_undelivered`, then `session_completed`. A worker that is stopping
releases the lease instead and enqueues the session's next job, so another worker resumes
it. An attempt that the bus refuses (`Fenced`: another attempt took over, or the session is
finished) stops where it is: no finish, no release, no further event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import redis

from daemon.agent.attempt import Attempt, Limits, never
from daemon.agent.attempthooks import Fencing, Metrics, Tracing
from daemon.agent.crashpoints import CrashPoints
from daemon.agent.endings import Ending
from daemon.agent.hooks import Hooks
from daemon.agent.journal import unfinished
from daemon.agent.loop import run_agent
from daemon.agent.model import Model, Usage
from daemon.agent.modelcall import CallSettings
from daemon.agent.prompt import build_system_prompt, gather_prompt_inputs
from daemon.agent.start import Forked, Fresh, Resumed, Start
from daemon.agent.state import AttemptState, SessionState
from daemon.agent.waiting import Pause
from daemon.bus.fleet.metrics import MetricsRecorder
from daemon.bus.session.attemptevents import AttemptEvents, discard_events, flush_events
from daemon.bus.session.eventwriter import EventWriter
from daemon.bus.session.fencing import Fenced, FencedEmitter, LeaseUnconfirmed
from daemon.bus.session.interruptlistener import InterruptListener
from daemon.bus.session.registry import SessionRegistry, record_fields
from daemon.bus.session.steerbus import Claim, ClaimRefused, SessionChannel, SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.clock import Clock, SystemClock
from daemon.host.faults import FaultPlan, crash_point, faults_enabled, plan_for
from daemon.sandbox import roots as workspace_roots
from daemon.schema.events import EventBase, SessionResumed, SessionStarted, SteerDelivered, ending_events
from daemon.schema.records import SessionRecord, SessionStatus
from daemon.session.coordinator import SessionCoordinator
from daemon.session.snapshotting import fork_start, turn_snapshots
from daemon.session.subagents import SUBAGENT_CHECK_SECONDS, FleetServices, Parent, Subagents
from daemon.session.workplace import deliver_work, place_agent, release_agent, worktree_parent
from daemon.tools import Emitter, Toolbox, WorkflowCursor, default_toolbox
from daemon.tools.ledger import FileLedger
from daemon.turn.messages import HANDOFF_NOTE, RESUME_NOTE, parse_message
from daemon.workflows import Catalog, CompiledWorkflow, WorkflowLimits
from daemon.workflows.engine import MissingContext, initial_context
from daemon.workspaces.delivery import DeliverySettings
from daemon.workspaces.placement import Placement, WorkspaceError

log = logging.getLogger(__name__)


@dataclass
class WorkerServices:
    """Everything a session attempt needs, built once per job by the worker."""

    bus: SteerBus
    registry: SessionRegistry
    events: Emitter
    issues: object  # daemon.bus.streams.issues.IssueSink
    catalog: Catalog
    make_model: Callable[[WorkflowLimits], Model]
    worker_id: str
    lease_seconds: float = 30.0
    idle_wait_seconds: float = 120.0
    soul_file: Path | None = None
    clock: Clock = field(default_factory=SystemClock)
    tools: Toolbox = field(default_factory=default_toolbox)
    # Renews the lease while an attempt runs, and yields the channel the loop uses: the
    # process's hub (daemon.session.sessionhub: idle waits and heartbeats on shared loops); by
    # default nothing renews it and the loop uses the claim's channel
    keep_lease: Callable[[SessionChannel], AbstractContextManager[SessionChannel]] = nullcontext[
        SessionChannel
    ]
    # Enqueues the session's job number n after a hand-over (worker.queueing.SessionJobQueue)
    enqueue_job: Callable[[str, int], object] = lambda _session_id, _number: None
    calls: CallSettings = field(default_factory=CallSettings)  # retries, the cap, the window
    # The process's one listener for interrupt steers (README's Managing steers); without it an interrupt
    # is noticed by the heartbeat, within a third of the lease
    interrupts: InterruptListener | None = None
    # signal_coordinator and spawn_agent (README's Sub-agents and questions); without it both answer a
    # tool error
    fleet: FleetServices | None = None
    delivery: DeliverySettings = field(default_factory=DeliverySettings)  # README's Coding sessions
    # The process's writer of queued attempt events (daemon/bus/session/eventwriter.py); without it an
    # attempt writes each batch of events at once
    event_writer: EventWriter | None = None
    # Runs before the claim: nothing in production; the crash tests' `before_claim` point when
    # the worker's environment arms faults (daemon/host/faults.py), chosen once, here
    before_claim: Callable[[SessionChannel, SessionRegistry], None] = field(
        default_factory=lambda: claim_faults()
    )


def no_claim_fault(channel: SessionChannel, registry: SessionRegistry) -> None:
    return None


def claim_fault(channel: SessionChannel, registry: SessionRegistry) -> None:
    """Crash tests only: the session's first job dies before its claim."""
    record = registry.get(channel.session_id)
    [jobs] = record_fields(channel.client, channel.bus.keys, channel.session_id, "jobs")
    first_job = jobs == "1"
    crash_point(plan_for(record.context if record and first_job else None, 1), "before_claim")


def claim_faults() -> Callable[[SessionChannel, SessionRegistry], None]:
    return claim_fault if faults_enabled() else no_claim_fault


def run_session(session_id: str, services: WorkerServices, stop: Callable[[], bool] = never) -> str:
    """Run one attempt; returns its outcome word (or `skipped`, `released`, `fenced`)."""
    channel = services.bus.channel(session_id, services.worker_id, services.lease_seconds)
    services.before_claim(channel, services.registry)
    try:
        claim = channel.claim()
    except ClaimRefused as refused:
        log.info("session %s not run here: %s", session_id, refused)
        return "skipped"
    record = services.registry.get(session_id)
    assert record is not None, "a claimed session has a record"
    # from here on, nothing this attempt emits is written once it is refused
    events = attempt_events(services.events, channel, services.event_writer)
    outcome = "fenced"
    try:
        outcome = run_claimed(channel, replace(services, events=events), claim, record, stop)
    finally:
        if outcome != "fenced":
            flush_events(events)  # what it still queued (a release, an error)
        else:
            discard_events(events)  # another attempt owns the session's story now
    return outcome


def run_claimed(
    channel: SessionChannel,
    services: WorkerServices,
    claim: Claim,
    record: SessionRecord,
    stop: Callable[[], bool],
) -> str:
    """The claimed attempt: run it, then finish the session or hand it over."""
    session_id = channel.session_id
    services.events.emit(*opening_events(channel, services, claim, record))
    try:
        interrupts = services.interrupts
        listening = interrupts.watching(session_id, channel.interrupt) if interrupts else nullcontext()
        # the heartbeat stops before finish or release; the loop runs on the channel it gives
        with services.keep_lease(channel) as looped, listening:
            ending = _attempt(record, looped, claim, services, stop)
            if ending.status is not None:  # under the heartbeat: a delivery can outlast a lease
                _deliver(looped, services, ending)
    except Fenced:
        return "fenced"  # the fence logged it: nothing more is done for this attempt
    except LeaseUnconfirmed as exc:
        # past its local lease deadline and Redis unreachable: this attempt starts nothing
        # more; the lease lapses and the reaper has the session resumed
        log.warning("%s; leaving the session to be resumed", exc)
        return "lease_unconfirmed"
    except redis.RedisError:
        # Redis is unreachable: nothing can be finished. The lease lapses and the reaper
        # has the session resumed from its last checkpoint.
        log.exception("session %s: Redis failed; leaving the session to be resumed", session_id)
        raise
    except Exception as exc:
        log.exception("session %s failed with an unexpected error", session_id)
        try:
            finish(channel, services, Ending(SessionStatus.FAILED, "error", f"{type(exc).__name__}: {exc}"))
        except Fenced:
            return "fenced"
        raise
    try:
        if ending.status is None:
            hand_over(channel, services)
        else:
            finish(channel, services, ending, delivered=True)
    except Fenced:
        return "fenced"
    except LeaseUnconfirmed as exc:  # the delivery's guard: Redis unreachable past the deadline
        log.warning("%s; leaving the session to be resumed", exc)
        return "lease_unconfirmed"
    return ending.outcome


def attempt_events(events: Emitter, channel: SessionChannel, writer: EventWriter | None = None) -> Emitter:
    """The attempt's own event sink, built anew for it (the worker's is never changed in
    place): its appends fenced in Redis, queued for its next script or the process's writer
    (daemon/bus/session/attemptevents.py; flushed by `run_session`); an emitter that is no EventSink
    (tests) gets the guard in front."""
    if isinstance(events, EventSink):
        return AttemptEvents(events, channel, writer)
    return FencedEmitter(events, channel.guard)


def opening_events(
    channel: SessionChannel, services: WorkerServices, claim: Claim, record: SessionRecord
) -> list[EventBase]:
    """session_started (and session_resumed), plus the receipt an earlier attempt journalled
    but did not live to confirm (unless its event is in the stream already)."""
    session_id = channel.session_id
    events: list[EventBase] = [
        SessionStarted(sessionId=session_id, worker=services.worker_id, attempt=claim.attempt)
    ]
    if claim.resumed:  # an earlier attempt died or handed over: this one carries on from it
        resumed = SessionResumed(sessionId=session_id, fromTurn=record.turnCount, worker=services.worker_id)
        events.append(resumed)
    receipt = claim.receipt
    if receipt is not None and not channel.receipt_emitted(receipt):
        events.append(SteerDelivered(sessionId=session_id, turnId=receipt.turn, offsets=receipt.offsets))
    return events


def hand_over(channel: SessionChannel, services: WorkerServices) -> None:
    """The worker is stopping: release the session and enqueue its next job at once."""
    number = channel.release()
    try:
        services.enqueue_job(channel.session_id, number)
    except redis.RedisError:
        # The release's mark expires after a lease and the reaper finds no such job.
        log.exception("session %s: could not enqueue job %d; the reaper will", channel.session_id, number)


def _attempt(
    record: SessionRecord,
    channel: SessionChannel,
    claim: Claim,
    services: WorkerServices,
    stop: Callable[[], bool],
) -> Ending:
    workflow = services.catalog.compiled(record.workflowId)
    if workflow is None:
        return Ending(
            SessionStatus.FAILED, "error", f"workflow {record.workflowId!r} is not known on this worker"
        )
    if (refused := refused_before_start(record, claim, services.worker_id)) is not None:
        return refused
    faults = plan_for(record.context, claim.attempt)
    try:  # the worktree, made at the first claim (README's Coding sessions; a fork's from its snapshot)
        placed = place_agent(record, channel, fork_start(record, faults))
    except WorkspaceError as exc:
        return Ending(SessionStatus.FAILED, "workspace_error", str(exc))
    try:
        cursor = open_cursor(workflow, record)
    except MissingContext as exc:
        return Ending(SessionStatus.FAILED, "error", f"the workflow cannot start: {exc}")
    if cursor.complete:  # the previous attempt completed the workflow and died before finishing
        return Ending(SessionStatus.COMPLETED, "workflow_complete", "all steps completed")
    saved = restored_state(record, cursor)
    start = open_history(saved, channel, claim.handed_over, forked_at(record))
    limits = Limits.of(workflow.limits, services.idle_wait_seconds)
    tools, clock, events, calls = services.tools, services.clock, services.events, services.calls
    hooks = loop_hooks(record.sessionId, channel.guard, calls.metrics, tools.tools, faults)
    try:
        own = attempt_state(record, workflow, placed, channel, services, stop)
        model = services.make_model(workflow.limits)
        attempt = Attempt(saved, own, model, channel, tools, clock, events, limits, stop, calls, hooks)
        return run_agent(attempt, start)
    finally:
        release_agent(placed)  # its grants were this attempt's


def refused_before_start(record: SessionRecord, claim: Claim, worker_id: str) -> Ending | None:
    """An attempt that ends before anything runs: its workspace is not here or not allowed,
    or the session was cancelled before it started."""
    workspace = Path(record.workspacePath)
    if not workspace.is_dir():
        detail = f"workspace {record.workspacePath} does not exist on worker {worker_id}"
        return Ending(SessionStatus.FAILED, "workspace_not_found", detail)
    if (refusal := workspace_roots.current().refusal(workspace)) is not None:  # M1: before any tool runs
        return Ending(SessionStatus.FAILED, "workspace_not_allowed", refusal)
    if claim.cancel_requested:
        return Ending(SessionStatus.CANCELLED, "cancelled", "cancelled before it started")
    return None


def restored_state(record: SessionRecord, cursor: WorkflowCursor) -> SessionState:
    """What the last checkpoint stored, from the session record (the history: `open_history`)."""
    return SessionState(
        cursor=cursor,
        turns=record.turnCount,
        usage=Usage(record.inputTokens, record.outputTokens, record.cacheReadTokens, record.cacheWriteTokens),
        compactions=record.compactions,
        files=FileLedger.from_json(record.readFiles),
    )


def attempt_state(
    record: SessionRecord,
    workflow: CompiledWorkflow,
    placed: Placement,
    channel: SessionChannel,
    services: WorkerServices,
    stop: Callable[[], bool],
) -> AttemptState:
    """This attempt's own: where it works, its system prompt, its way out to the coordinator,
    its worktree's snapshots."""
    inputs = gather_prompt_inputs(
        record.sessionId,
        workflow.id,
        workflow.name,
        workflow.step_count,
        record.goal,
        placed.path,
        services.soul_file,
        context=record.context,
        workflow_guidance=workflow.workflow.metaGuidance,
    )
    return AttemptState(
        session_id=record.sessionId,
        workspace=placed.path,
        system=build_system_prompt(inputs),
        issues=services.issues,
        elapsed_before=_elapsed_since(record.startedAt),
        read_only=placed.read_only,
        coordinator=coordinator_for(record, channel, services, stop, placed.path, placed.read_only, placed),
        snapshot=turn_snapshots(record, placed, services.delivery),
    )


def loop_hooks(
    session_id: str,
    guard: Callable[[], None],
    metrics: MetricsRecorder,
    tools: Collection[str],
    faults: FaultPlan | None,
) -> Hooks:
    """What runs at the loop's points (daemon/agent/hooks.py): the fence's checks, metrics,
    tracing; first, so that they are the outermost, the crash tests' kill points when the
    session's fault plan exists (daemon/agent/crashpoints.py)."""
    crashes = [CrashPoints(faults)] if faults is not None else []
    return Hooks(
        [
            *crashes,
            Fencing(guard),
            Metrics(metrics, tools),
            Tracing(session_id),
        ]
    )


def coordinator_for(
    record: SessionRecord,
    channel: SessionChannel,
    services: WorkerServices,
    stop: Callable[[], bool],
    workspace: Path,
    read_only: bool,
    placed: Placement | None = None,
) -> SessionCoordinator | None:
    """The session side of signal_coordinator and spawn_agent for this attempt: children work
    where this session works (its worktree, if it has one), read-only if it is."""
    fleet = services.fleet
    if fleet is None:
        return None
    parent = Parent(
        session_id=record.sessionId,
        root_id=record.rootSessionId or record.sessionId,
        depth=record.depth,
        workspace=str(workspace),
        read_only=read_only,
        **worktree_parent(record, placed, services.delivery.author),
    )
    pause = Pause(channel, services.clock, stop, services.calls.wake, check_seconds=SUBAGENT_CHECK_SECONDS)
    subagents = Subagents(fleet, services.bus, services.registry, channel, parent, services.events, pause)
    return SessionCoordinator(channel, fleet.signals, subagents)


def open_cursor(workflow: CompiledWorkflow, record: SessionRecord) -> WorkflowCursor:
    """The workflow position: the engine state the last checkpoint wrote, or a fresh start."""
    context = initial_context(record.goal, record.workspacePath, record.context)
    return WorkflowCursor.restore(workflow, record.workflowState, context, record.gates, record.fatalIssue)


def forked_at(record: SessionRecord) -> int | None:
    """A fork that has not started a turn of its own yet: the turn its history ends with."""
    fork = record.forkOf
    return fork.turn if fork is not None and record.turnCount == fork.turn else None


def open_history(
    saved: SessionState, channel: SessionChannel, handed_over: bool = False, forked: int | None = None
) -> Start:
    """Load the checkpointed history and say how this attempt starts (daemon/agent/start.py).

    No checkpoint (also when an earlier attempt died before writing one): `Fresh`. A fork
    before its first turn of its own (`forked`): `Forked` — its copied history ends with a
    turn that ended, even when it ends with the reply of a turn that asked for no tool, so
    its first own turn asks the model with its steer. A checkpoint whose last turn has its
    reply journaled and no end (docs/durability.md, daemon/agent/journal.py): `Journaled`,
    that turn. Else `Resumed`, with the resume note, or the hand-over note when the previous
    worker released the session cleanly. The steers themselves are taken when the first
    turn starts (`agent.start_turn`), atomically with binding it.
    """
    stored = channel.history()
    if not stored:
        return Fresh()
    saved.history = [parse_message(raw) for raw in stored]
    if forked is not None:
        return Forked()
    journaled = unfinished(saved.history)
    if journaled is not None:
        return journaled
    return Resumed(HANDOFF_NOTE if handed_over else RESUME_NOTE)


def _deliver(channel: SessionChannel, services: WorkerServices, ending: Ending) -> None:
    assert ending.status is not None
    record = services.registry.get(channel.session_id)
    if record is not None:
        deliver_work(channel, services.events, services.delivery, record, ending.status.value, ending.outcome)


def finish(
    channel: SessionChannel, services: WorkerServices, ending: Ending, delivered: bool = False
) -> None:
    """Deliver a worktree's work (README's Coding sessions; unless `delivered` already, under the lease's
    heartbeat); end the session on the bus; emit steer_undelivered (if any), then
    session_completed."""
    assert ending.status is not None
    if not delivered:
        _deliver(channel, services, ending)
    # the last turn's queued events (its step_advanced, its tool results) ride with finish.lua,
    # ahead of it: a coordinator that sees `completed` then reads them all
    undelivered = channel.finish(ending.status, ending.outcome, ending.detail)
    session_id = channel.session_id
    services.events.emit(
        *ending_events(session_id, ending.status.value, ending.outcome, ending.detail, undelivered)
    )
    services.registry.mark_finished(session_id, services.bus.retention_seconds)
    log.info("session %s %s: %s (%s)", session_id, ending.status.value, ending.outcome, ending.detail)


def _elapsed_since(started_at: str | None) -> float:
    """Wall-clock seconds since the session first started (0 for a fresh one)."""
    if not started_at:
        return 0.0
    try:
        started = datetime.fromisoformat(started_at)  # written by utc_now_iso (claim.lua)
    except ValueError:
        log.warning("startedAt %r is not a timestamp; the wall-clock limit counts from now", started_at)
        return 0.0
    return max((datetime.now(UTC) - started).total_seconds(), 0.0)
