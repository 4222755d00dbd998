"""Sub-agents (README's Sub-agents and questions): a parent's `spawn_agent` starts children on the fleet
and waits for them.

Children are dispatched through daemon/bus/session/dispatch.py like any session (registry, RQ job,
`session_queued`), each with `parentSessionId`, `rootSessionId` and `depth`, and with the
idempotency key `spawn.<parent>.<tool_use id>.<i>`: a parent resumed after kill -9 or a
lease takeover asks the model again from its last checkpoint, gets the same call back, and
finds the SAME children (the dispatch answers the first session for a key it has seen).

The wait keeps the turn live: the record shows `status: waiting`, `waitingFor: children`;
the lease is renewed by the attempt's heartbeat as during any tool; every `POLL_SECONDS`
the children's statuses are read in one round trip, and the parent's own state is checked
(daemon/agent/waiting.py `Pause`): a cancel cascades to every descendant and ends the
wait, a stopping worker abandons the turn (resumed elsewhere, waiting for the same
children), an interrupt steer ends the wait at once while the children go on.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from daemon.agent.endings import CANCELLED, RELEASED
from daemon.agent.waiting import Pause
from daemon.bus.session.dispatch import (
    AgentConfigRefused,
    DispatchContended,
    Dispatcher,
    IdempotencyKeyReuse,
    new_session,
    session_agent,
)
from daemon.bus.session.fencing import Fenced
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.signals import SignalStream
from daemon.bus.session.spawns import SessionTree, cancel_descendants
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.ids import CLIENT_MSG_ID_RE
from daemon.schema.events import ChildrenSpawned
from daemon.schema.records import SessionStatus
from daemon.schema.workspace import WorkspacePlan
from daemon.session.gitbox import SandboxBox
from daemon.tools import Emitter
from daemon.tools.coordination import AgentSpec, SpawnOutcome
from daemon.turn.interrupt import Interrupted, TurnInterrupt
from daemon.workflows import Catalog
from daemon.workspaces.delivery import DeliverySettings, commit_all, fetch_branch
from daemon.workspaces.git import DEFAULT_AUTHOR, GitError
from daemon.workspaces.worktree import main_repository

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # how often a waiting parent reads its children's statuses
SUBAGENT_CHECK_SECONDS = 0.5  # ... and its own record (a cancel), with one heartbeat
MAX_CHILDREN_PER_SESSION = 50
SPAWN_DIGEST = "spawn"  # the key alone names the child: a repeat always answers the first one


@dataclass
class FleetServices:
    """What signals and sub-agents need; built once per worker process."""

    dispatcher: Dispatcher
    tree: SessionTree
    signals: SignalStream
    sink: EventSink  # unbatched: a cascaded cancel's ending events are another session's
    catalog: Catalog
    max_spawn_depth: int = 2
    max_children_per_session: int = MAX_CHILDREN_PER_SESSION


@dataclass(frozen=True)
class Parent:
    """The spawning session, as its record says."""

    session_id: str
    root_id: str
    depth: int
    workspace: str  # where it works (its worktree, if it has one): its children work there too
    read_only: bool = False  # ... and only look, if it does
    # a worktree parent (README's Sub-agents and questions): the main repository, its branch and its own
    # repository,
    # for children with branchStrategy worktree (branched from the parent's head)
    repo: str | None = None
    branch: str | None = None
    tree: str | None = None
    grants: tuple[str, ...] = ()
    author: str = DEFAULT_AUTHOR
    branch_existed: bool = False  # then its branch is only fast-forwarded in the main repository


def spawn_key(parent: str, tool_use_id: str, index: int) -> str:
    """The dispatch idempotency key of one child (daemon.host.ids: `[A-Za-z0-9._:-]{1,128}`)."""
    use = tool_use_id if CLIENT_MSG_ID_RE.fullmatch(tool_use_id) and len(tool_use_id) <= 64 else None
    if use is None:
        use = "h" + hashlib.blake2b(tool_use_id.encode(), digest_size=12).hexdigest()
    return f"spawn.{parent}.{use}.{index}"


class Subagents:
    """One attempt's spawn_agent: start, wait, report."""

    def __init__(
        self,
        fleet: FleetServices,
        bus: SteerBus,
        registry: SessionRegistry,
        channel: SessionChannel,
        parent: Parent,
        events: Emitter,
        pause: Pause,
    ) -> None:
        self.fleet = fleet
        self.bus = bus
        self.registry = registry
        self.channel = channel
        self.parent = parent
        self.events = events
        self.pause = pause

    def spawn(
        self, turn_id: int, tool_use_id: str, agents: list[AgentSpec], interrupt: TurnInterrupt | None
    ) -> SpawnOutcome:
        if refused := self._refusal(tool_use_id, agents):
            return SpawnOutcome(refused, is_error=True)
        base: str | None = None
        if any(a.branchStrategy == "worktree" for a in agents):
            try:
                base = self._commit_work_so_far()
            except GitError as exc:
                return SpawnOutcome(
                    f"spawn_agent refused: this session's work could not be committed: {exc}", True
                )
        ids: list[str] = []
        for index, spec in enumerate(agents):
            try:
                ids.append(self._dispatch(tool_use_id, index, spec, base))
            except (IdempotencyKeyReuse, DispatchContended) as exc:
                log.warning(
                    "%s: child %d of %s not started: %r", self.parent.session_id, index, tool_use_id, exc
                )
                return SpawnOutcome(f"Child {index + 1} could not be started ({type(exc).__name__}).", True)
        parent = self.parent.session_id
        spawned = ChildrenSpawned(sessionId=parent, turnId=turn_id, children=ids, toolUseId=tool_use_id)
        return self._wait(ids, interrupt, spawned)

    def _refusal(self, tool_use_id: str, agents: list[AgentSpec]) -> str | None:
        """Why this call cannot start its children (a tool error the agent can act on), or None."""
        fleet = self.fleet
        if self.parent.depth + 1 > fleet.max_spawn_depth:
            return (
                f"spawn_agent refused: this session is at depth {self.parent.depth} and children may go "
                f"{fleet.max_spawn_depth} levels deep (WORKTRAIN_MAX_SPAWN_DEPTH). Do the work yourself."
            )
        if any(a.branchStrategy == "worktree" for a in agents) and self.parent.read_only:
            return "spawn_agent refused: a read-only session's children cannot have worktrees of their own."
        unknown = sorted({a.workflowId for a in agents if fleet.catalog.compiled(a.workflowId) is None})
        if unknown:
            return f"spawn_agent refused: unknown workflow(s) {', '.join(unknown)}."
        for agent in agents:
            compiled = fleet.catalog.compiled(agent.workflowId)
            assert compiled is not None, "checked above"
            try:
                session_agent(agent.agentConfig, compiled)
            except AgentConfigRefused as why:
                return f"spawn_agent refused: agentConfig of {agent.workflowId}: {why}"
        keys = [spawn_key(self.parent.session_id, tool_use_id, i) for i in range(len(agents))]
        known = fleet.dispatcher.known(keys)  # this call's children from an earlier attempt
        existing = len(fleet.tree.children(self.parent.session_id)) - known
        if existing + len(agents) > fleet.max_children_per_session:
            return (
                f"spawn_agent refused: a session may start {fleet.max_children_per_session} children; "
                f"this one has {existing} and asked for {len(agents)} more."
            )
        return None

    def _callback_url(self) -> str | None:
        """A child reports to its parent's receiver (README's Webhooks). The agent never picks a
        URL itself: receivers are chosen by the operator or a token holder."""
        record = self.registry.get(self.parent.session_id)
        return record.callbackUrl if record is not None else None

    def _commit_work_so_far(self) -> str | None:
        """A worktree parent's work so far, committed (in the box) and fetched into the main
        repository, where its children branch from: the base ref they start at (None: the
        parent has no repository of its own; children branch from its workspace's HEAD)."""
        parent = self.parent
        if parent.repo is None or parent.tree is None or parent.branch is None:
            return None
        self.channel.guard()
        tree, box = Path(parent.tree), SandboxBox(tuple(Path(p) for p in parent.grants))
        settings = DeliverySettings(author=parent.author)
        commit_all(
            box,
            tree,
            "Work so far, before starting sub-agents",
            f"WorkTrain-Session: {parent.session_id}",
            settings,
        )
        repo = main_repository(Path(parent.repo))
        timeout = settings.git_timeout_seconds
        fetch_branch(box, repo, tree, parent.branch, timeout, replace=not parent.branch_existed)
        return f"refs/heads/{parent.branch}"

    def _dispatch(self, tool_use_id: str, index: int, spec: AgentSpec, base: str | None = None) -> str:
        parent = self.parent
        compiled = self.fleet.catalog.compiled(spec.workflowId)
        assert compiled is not None, "checked by _refusal"
        read_only = parent.read_only or spec.branchStrategy == "read-only"
        workspace_path, plan = (
            parent.workspace,
            WorkspacePlan(branchStrategy="read-only" if read_only else "none"),
        )
        if spec.branchStrategy == "worktree" and not read_only:
            # its own repository, from the main repository at the parent's head: delivered onto
            # its own branch there, which the parent can fetch and merge
            workspace_path = parent.repo or parent.workspace
            plan = WorkspacePlan(branchStrategy="worktree", baseRef=base)
        new = new_session(
            compiled,
            spec.goal,
            workspace_path,
            spec.context,
            workspace=plan,
            parentSessionId=parent.session_id,
            rootSessionId=parent.root_id,
            depth=parent.depth + 1,
            callbackUrl=self._callback_url(),
            agentConfig=session_agent(spec.agentConfig, compiled),  # checked by _refusal
        )
        key = spawn_key(parent.session_id, tool_use_id, index)
        self.channel.guard()  # a stale attempt starts nothing
        return self.fleet.dispatcher.dispatch(new, compiled.limits, (key, SPAWN_DIGEST)).session_id

    def _wait(
        self, ids: list[str], interrupt: TurnInterrupt | None, spawned: ChildrenSpawned
    ) -> SpawnOutcome:
        tree = self.fleet.tree
        self.channel.mark_waiting("children", SessionStatus.WAITING)
        self.events.emit(spawned)  # after the mark: whoever reads the record on it sees the wait
        try:
            while not all(s is None or s.finished for s in tree.statuses(ids).values()):
                try:
                    ending = self.pause.sleep(POLL_SECONDS, interrupt)
                except Interrupted:
                    text = "Interrupted by the coordinator; the children go on without you: " + ", ".join(ids)
                    return SpawnOutcome(text)
                if ending is CANCELLED:
                    cancelled = cancel_descendants(
                        self.bus, self.registry, self.fleet.sink, tree, self.parent.session_id
                    )
                    log.info(
                        "%s cancelled while waiting: cancelled %d descendants",
                        self.parent.session_id,
                        len(cancelled),
                    )
                    return SpawnOutcome("The session was cancelled; so were its children.", is_error=True)
                if ending is RELEASED:
                    return SpawnOutcome("The worker is stopping; the wait resumes elsewhere.", released=True)
        finally:
            self._clear_waiting()
        return SpawnOutcome(report([tree.result(child) for child in ids]))

    def _clear_waiting(self) -> None:
        try:
            self.channel.mark_waiting(None, SessionStatus.RUNNING)
        except redis.RedisError:
            log.exception(
                "%s: waitingFor=children not cleared; the next checkpoint clears it", self.parent.session_id
            )
        except Fenced as exc:  # this attempt is over; whatever it was doing goes on
            log.info("%s: not clearing waitingFor=children: %s", self.parent.session_id, exc)


def report(results: list[Any]) -> str:
    """The tool result: every child in the order given, as JSON the agent can read."""
    children = [r.model_dump(mode="json") for r in results]
    done = sum(1 for r in results if r.status == SessionStatus.COMPLETED)
    head = f"{len(results)} child session(s) ended: {done} completed, {len(results) - done} not."
    return head + "\n" + json.dumps({"children": children}, indent=1, ensure_ascii=False)
