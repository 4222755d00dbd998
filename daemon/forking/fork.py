"""A fork, from a request to its registration (README's "Fork a session", SPEC 3.12).

`Forker.fork(request)` reads the source as it is (record, history, turn marks: one read),
`plan` decides — purely — what the fork is or why there is none, and the dispatch writes the
fork in one transaction (daemon/bus/session/forks.py): a queued session like any other, steerable at
once, whose first job the fleet runs. The source, running or ended, is read, never changed.

What a source allows (`ForkRefused`: status, code, sentence — the API's error body):
- 404 `session_not_found`: no such session (or it expired);
- 400 `unknown_turn`: a turn the source never ended (not yet, or cut short before its reply);
- 409 `journal_gone`: the source keeps no journal of its turns (its record and history
  expired with the retention period — its turn marks, kept twice as long, say it existed —,
  its history is gone, or it ran before forks existed);
  409 `turn_compacted`: a compaction summarised that turn;
  409 `snapshot_gone`: a worktree session without a snapshot of that turn (not made, or
  pruned by the keep policy: daemon/workspaces/snapshots.py, or gone with a repository
  removed at delivery whose snapshots could not be fetched into the main repository); 409 `workflow_gone`: its
  workflow is no longer in the catalog;
- 400 `invalid_request`: the turn completed the workflow (nothing is left to do), a turn
  that asked for no tool forked without a steer (the fork would have nothing to read), an
  agentConfig the API would refuse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from daemon.bus.session.dispatch import AgentConfigRefused, Dispatcher, session_agent
from daemon.bus.session.forks import ForkSource, ForkStore, ForkWrites
from daemon.bus.session.registry import NewSession
from daemon.forking.history import TurnNotInHistory, history_through
from daemon.schema.records import ForkOf, SessionRecord
from daemon.schema.turnmarks import SnapshotRef, TurnMarks
from daemon.schema.webhookpayloads import SessionFacts
from daemon.schema.workspace import WorkspacePlan
from daemon.turn.messages import Message, parse_message
from daemon.workflows import Catalog, CompiledWorkflow
from daemon.workflows.agentconfig import AgentConfig
from daemon.workflows.engine import EngineState

# the position fields a turn mark keeps that a fork's record starts with (`waitingFor` is the
# worker's to set: a fork waits for nothing until it runs)
POSITION_FIELDS = ("stepId", "stepTitle", "stepIndex", "stepCount", "fatalIssue", "workflowState")


class ForkRefused(Exception):
    """No fork: the API's status, code and sentence."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ForkRequest:
    source: str
    turn: int
    steer: str | None = None
    agent: AgentConfig | None = None
    goal: str | None = None
    idempotency: tuple[str, str] | None = None  # (Idempotency-Key, the request's digest)


@dataclass(frozen=True)
class Forked:
    session_id: str
    status: str
    workflow_id: str
    fork_of: ForkOf
    conversation_only: bool
    duplicate: bool = False


def _turn_end(marks: TurnMarks, turn: int) -> int:
    """The steps count of the turn's end mark (ForkRefused: the source never ended it)."""
    if not marks.ends:
        raise ForkRefused(
            409,
            "journal_gone",
            "The session keeps no journal of its turns to fork from (its history expired, or it ran "
            "before WorkTrain kept one).",
        )
    end = marks.ends.get(turn)
    if end is not None:
        return end.steps
    last = marks.last_ended
    if turn > last:
        raise ForkRefused(
            400, "unknown_turn", f"The session has not ended turn {turn} (its last ended turn: {last})."
        )
    raise ForkRefused(
        400, "unknown_turn", f"Turn {turn} left no reply to fork from (it was cut short); pick another turn."
    )


def _history(source: ForkSource, turn: int, steps: int) -> list[Message]:
    try:
        history = [parse_message(raw) for raw in source.history]
        return history_through(history, turn, steps)
    except ValidationError:
        raise ForkRefused(409, "journal_gone", "The session's checkpointed history is unreadable.") from None
    except TurnNotInHistory as exc:
        if exc.compacted:
            raise ForkRefused(409, "turn_compacted", f"No fork from turn {turn}: {exc}.") from None
        raise ForkRefused(409, "journal_gone", f"No fork from turn {turn}: {exc}.") from None


def _position(marks: TurnMarks, turn: int, record: SessionRecord, goal: str) -> dict[str, str | int]:
    """The record fields of the workflow position at the turn's end (the goal replaced in its
    context when the fork has another). ForkRefused when there is none, or nothing left."""
    state = marks.state_at(turn)
    if state is None or not isinstance(state.get("workflowState"), str):
        raise ForkRefused(
            409, "journal_gone", f"The workflow position at the end of turn {turn} is not kept."
        )
    saved: dict[str, Any] = json.loads(state["workflowState"])
    engine = EngineState.model_validate(saved.get("engine") or {})
    if engine.complete and not saved.get("awaitingConfirmation"):
        raise ForkRefused(
            400,
            "invalid_request",
            f"Turn {turn} completed the workflow: a fork from it has nothing left to do: pick another.",
        )
    context = saved.get("engine", {}).get("context")
    if goal != record.goal and isinstance(context, dict) and context.get("goal") == record.goal:
        context["goal"] = goal  # the fork's goal, where the workflow reads it
        state = {**state, "workflowState": json.dumps(saved)}
    return {name: state[name] for name in POSITION_FIELDS if isinstance(state.get(name), (str, int))}


def _snapshot(source: ForkSource, turn: int) -> SnapshotRef | None:
    if source.record.branchStrategy != "worktree":
        return None  # its conversation only: the fork works where the source works
    snapshot = source.marks.snapshots.get(turn)
    if snapshot is None:
        raise ForkRefused(
            409,
            "snapshot_gone",
            f"No snapshot of the worktree at the end of turn {turn} is kept (none was made, or the keep "
            "policy pruned it): fork from another turn.",
        )
    delivery = source.record.delivery
    own = snapshot.sessionId == source.record.sessionId  # (a copied turn's is another session's)
    if own and delivery is not None and not delivery.worktree and not delivery.snapshots:
        raise ForkRefused(  # its repository is gone, and its snapshots went with it
            409,
            "snapshot_gone",
            "The session's repository was removed at its delivery and its snapshots were not fetched "
            "into the main repository: no worktree is left to fork.",
        )
    return snapshot


def plan(
    source: ForkSource, request: ForkRequest, compiled: CompiledWorkflow
) -> tuple[NewSession, ForkWrites]:
    """The fork of `source` that `request` asks for: its registration and its own writes."""
    record, turn = source.record, request.turn
    steps = _turn_end(source.marks, turn)
    history = _history(source, turn, steps)
    if history[-1].role == "assistant" and not request.steer:
        raise ForkRefused(
            400, "invalid_request", f"Turn {turn} asked for no tool: a fork from it needs a steer to read."
        )
    goal = request.goal or record.goal
    fields: dict[str, str | int] = {"turnCount": turn, **_position(source.marks, turn, record, goal)}
    snapshot = _snapshot(source, turn)
    requested = (request.agent or AgentConfig()).over(record.agentConfig or AgentConfig())
    try:
        agent = session_agent(requested, compiled)
    except AgentConfigRefused as why:
        raise ForkRefused(400, "invalid_request", f"agentConfig: {why}") from None
    fork_of = ForkOf(sessionId=record.sessionId, turn=turn, snapshot=snapshot)
    new = NewSession(
        workflowId=record.workflowId,
        goal=goal,
        workspacePath=record.workspacePath,
        context=record.context,
        stepCount=record.stepCount,
        gates=record.gates,
        workspace=WorkspacePlan(
            branchStrategy=record.branchStrategy,
            deliveryMode=record.deliveryMode,
            baseRef=record.baseRef,
            keepWorktree=record.keepWorktree,
        ),  # its own branch, worktrain/<its id>, from the snapshot (daemon/session/snapshotting.py)
        callbackUrl=record.callbackUrl,
        agentConfig=agent,
        forkOf=fork_of,
    )
    writes = ForkWrites(
        source=record.sessionId,
        turn=turn,
        fields=fields,
        history=[message.to_json() for message in history],
        marks=source.marks.through(turn),
        steer=request.steer,
        conversation_only=snapshot is None,
        facts=SessionFacts(workflowId=record.workflowId, goal=goal, callbackUrl=record.callbackUrl),
    )
    return new, writes


class Forker:
    """Forks sessions: the web tier's `POST /sessions/<id>/fork` (web/forks.py)."""

    def __init__(self, store: ForkStore, dispatcher: Dispatcher, catalog: Catalog) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.catalog = catalog

    def fork(self, request: ForkRequest) -> Forked:
        """The fork (or, for a repeated Idempotency-Key, the first one); ForkRefused, and the
        dispatch's IdempotencyKeyReuse and DispatchContended."""
        if request.idempotency is not None and (first := self.dispatcher.answered(request.idempotency)):
            return self._answer(first.session_id, first.status, duplicate=True)
        source = self.store.read(request.source)
        if source is None and self.store.outlived(request.source):
            raise ForkRefused(
                409,
                "journal_gone",
                "The session ended longer ago than the retention period: no journal is left.",
            )
        if source is None:
            raise ForkRefused(404, "session_not_found", "Session not found or not a daemon session.")
        compiled = self.catalog.compiled(source.record.workflowId)
        if compiled is None:
            raise ForkRefused(
                409,
                "workflow_gone",
                f"The session's workflow {source.record.workflowId!r} is no longer known.",
            )
        new, writes = plan(source, request, compiled)
        done = self.dispatcher.dispatch(
            new, compiled.limits, request.idempotency, seed=self.store.seed(writes)
        )
        return self._answer(done.session_id, done.status, duplicate=done.duplicate)

    def _answer(self, session_id: str, status: str, duplicate: bool) -> Forked:
        record = self.store.registry.get(session_id)
        if record is None or record.forkOf is None:  # a key of another kind of dispatch, or expired
            raise ForkRefused(
                422, "idempotency_key_reuse", "This Idempotency-Key was used before with a different request."
            )
        return Forked(
            session_id=session_id,
            status=status,
            workflow_id=record.workflowId,
            fork_of=record.forkOf,
            conversation_only=record.forkOf.snapshot is None,
            duplicate=duplicate,
        )
