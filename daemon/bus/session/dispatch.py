"""Dispatch (README's HTTP API): register a session, its `session_queued` event and its RQ job at once.

The one path every new session takes — `POST /api/v2/auto/dispatch` (web/sessions.py), a
trigger's fire (README's Triggers, daemon/triggers/firing.py: `prepare` then `dispatch`, like
the HTTP route) and a worker's `spawn_agent` (README's Sub-agents and questions,
daemon/session/subagents.py) — so every session is one like any other: in the registry, on
the queue, in the event streams. One MULTI/EXEC: a
worker never sees the job without the session (nor a session without its job), and
`session_queued` is in the streams before anything the worker emits. With an idempotency
key, the key's record joins the same transaction, WATCHed, so two dispatches with one key
create one session; a repeat with the same body answers the first session (`duplicate`).
`Alongside` lets a caller WATCH more keys and add writes of its own to that transaction (a
trigger's "one live session per key": daemon/bus/fleet/triggers.py).

The queue's client must be a `decode_responses=False` one (RQ's payloads are bytes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Protocol

import redis
from pydantic import BaseModel, ConfigDict
from redis.client import Pipeline

from daemon.bus.jobspec import enqueue_session_job, job_queue
from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.streams.eventsink import EventSink
from daemon.host.config import ModelSettings
from daemon.host.redisconn import as_text
from daemon.schema.events import SessionQueued
from daemon.schema.records import SessionStatus, TriggerOrigin
from daemon.schema.workspace import BranchStrategy, DeliveryMode, WorkspacePlan
from daemon.workflows import Catalog, CompiledWorkflow, WorkflowError, WorkflowLimits
from daemon.workflows.agentconfig import AgentConfig, problem
from daemon.workflows.engine import first_step

log = logging.getLogger(__name__)

IDEMPOTENT_TRIES = 5  # WATCH conflicts happen only while another dispatch sets the same key


class IdempotencyKeyReuse(Exception):
    """The idempotency key was used before with a different request body."""


class DispatchContended(Exception):
    """The idempotency key stayed contended for every try."""


class AgentConfigRefused(ValueError):
    """The session's agentConfig, resolved, is one the API would refuse (a 400's reason)."""


@cache
def env_agent_defaults() -> AgentConfig:
    """The environment's layer of agentConfig (WORKTRAIN_MODEL, _MAX_OUTPUT_TOKENS,
    _THINKING_BUDGET): read once per process."""
    settings = ModelSettings()
    return AgentConfig(
        model=settings.model,
        maxOutputTokens=settings.max_output_tokens,
        thinkingBudgetTokens=settings.thinking_budget,
    )


def session_agent(
    requested: AgentConfig | None, compiled: CompiledWorkflow, defaults: AgentConfig | None = None
) -> AgentConfig:
    """The model a new session runs: the request's fields, then the workflow's own
    agentConfig, then the environment's; raises AgentConfigRefused with the reason."""
    base = defaults if defaults is not None else env_agent_defaults()
    resolved = (requested or AgentConfig()).over(compiled.workflow.agentConfig).over(base)
    if (why := problem(resolved)) is not None:
        raise AgentConfigRefused(why)
    return resolved


def new_session(
    compiled: CompiledWorkflow,
    goal: str,
    workspace_path: str,
    context: dict[str, Any] | None,
    **fields: Any,
) -> NewSession:
    """The record of a session of `compiled` about to be dispatched: its step count and first
    step as rendered for `goal` and `context`, with `fields` (gates, workspace, parent ...) as
    given. One builder for the web's dispatch and spawn_agent's."""
    first = first_step(compiled, goal, workspace_path, context)
    return NewSession(
        workflowId=compiled.id,
        goal=goal,
        workspacePath=workspace_path,
        context=context,
        stepCount=compiled.step_count,
        firstStepId=first.step_id if first else None,
        firstStepTitle=first.title if first else None,
        **fields,
    )


class UnknownWorkflow(LookupError):
    """The catalog has no workflow by that id."""


class WorkflowUnrunnable(ValueError):
    """The workflow is in the catalog but cannot run (its error says why)."""


class SessionRequest(BaseModel):
    """What a dispatch asks for, whoever asks: the HTTP body (web/models.py DispatchBody,
    validated there) or a trigger's fire (its file entry and rendered templates)."""

    model_config = ConfigDict(frozen=True)

    workflowId: str
    goal: str
    workspacePath: str
    context: dict[str, Any] | None = None
    gates: Literal["skip", "steer"] = "skip"
    branchStrategy: BranchStrategy = "none"
    delivery: DeliveryMode = "commit"
    baseRef: str | None = None
    branch: str | None = None
    keepWorktree: bool = False
    agentConfig: AgentConfig | None = None
    callbackUrl: str | None = None


def prepare(
    catalog: Catalog, request: SessionRequest, trigger: TriggerOrigin | None = None
) -> tuple[NewSession, WorkflowLimits]:
    """The session a request dispatches, and its workflow's limits. Raises UnknownWorkflow,
    WorkflowUnrunnable, AgentConfigRefused (each a 400 at the HTTP door)."""
    try:
        compiled = catalog.compiled(request.workflowId)
    except WorkflowError as exc:  # only in a catalog not made by load_catalog (which skips it)
        raise WorkflowUnrunnable(str(exc)) from None
    if compiled is None:
        raise UnknownWorkflow(request.workflowId)
    new = new_session(
        compiled,
        request.goal,
        request.workspacePath,
        request.context,
        gates=request.gates,
        workspace=WorkspacePlan(
            branchStrategy=request.branchStrategy,
            deliveryMode=request.delivery,
            baseRef=request.baseRef,
            branch=request.branch,
            keepWorktree=request.keepWorktree,
        ),
        callbackUrl=request.callbackUrl,
        agentConfig=session_agent(request.agentConfig, compiled),
        trigger=trigger,
    )
    return new, compiled.limits


@dataclass(frozen=True, slots=True)
class Alongside:
    """What a caller adds to a dispatch's transaction: keys WATCHed with the idempotency key,
    a `check` run on the watching pipeline before MULTI (it reads at once; it raises to
    dispatch nothing), and `stage`, writes queued into the MULTI given the new session id."""

    watch: tuple[str, ...]
    check: Callable[[Pipeline], None]
    stage: Callable[[Pipeline, str], None]


@dataclass(frozen=True, slots=True)
class Dispatched:
    session_id: str
    status: str
    duplicate: bool = False


class JobQueue(Protocol):
    """What dispatch needs of a job queue: a pipeline to write into, and one enqueue."""

    def pipeline(self) -> Pipeline: ...

    def watching(self, *keys: str) -> Pipeline: ...

    def enqueue(self, session_id: str, limits: WorkflowLimits, pipeline: Pipeline) -> None: ...


class RqJobQueue:
    """The `worktrain` RQ queue, written inside a dispatch's MULTI."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.queue = job_queue(client)

    def pipeline(self) -> Pipeline:
        """A MULTI/EXEC pipeline already in MULTI mode (RQ requires it for a caller's pipeline)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.multi()
        return pipe

    def watching(self, *keys: str) -> Pipeline:
        """A MULTI/EXEC pipeline that WATCHes `keys`: it reads at once until the caller's
        `multi()`, and its `execute()` raises WatchError if one of them changed meanwhile."""
        pipe = self.client.pipeline(transaction=True)
        pipe.watch(*keys)  # type: ignore[no-untyped-call]
        return pipe

    def enqueue(self, session_id: str, limits: WorkflowLimits, pipeline: Pipeline) -> None:
        enqueue_session_job(self.queue, session_id, 1, limits, pipeline=pipeline)


# More writes for a session being dispatched, in its transaction (pipeline, its new id): the
# JSON lines of the events it staged, for the JSONL mirror once the transaction ran.
Seed = Callable[[Pipeline, str], list[str]]


class Dispatcher:
    """Registers sessions; `jobs` is an RqJobQueue (or a test's double)."""

    def __init__(
        self,
        jobs: JobQueue,
        keys: Keys,
        registry: SessionRegistry,
        events: EventSink,
        retention_seconds: int,
    ) -> None:
        self.jobs = jobs
        self.keys = keys
        self.registry = registry
        self.events = events
        self.retention_seconds = retention_seconds

    def known(self, idempotency_keys: Sequence[str]) -> int:
        """How many of these Idempotency-Keys have dispatched a session already (one EXISTS)."""
        if not idempotency_keys:
            return 0
        return int(self.registry.client.exists(*(self.keys.dispatch_key(key) for key in idempotency_keys)))

    def dispatch(
        self,
        new: NewSession,
        limits: WorkflowLimits,
        idempotency: tuple[str, str] | None = None,
        alongside: Alongside | None = None,
        seed: Seed | None = None,
    ) -> Dispatched:
        """`idempotency` is (key, body digest); raises IdempotencyKeyReuse, DispatchContended,
        and what `alongside.check` raises. `alongside` needs an idempotency key. `seed`: more of
        the new session, written in the same transaction (a fork's history)."""
        if idempotency is None:
            if alongside is not None:
                raise ValueError("a dispatch with `alongside` needs an idempotency key")
            pipe = self.jobs.pipeline()
            return Dispatched(self._register(pipe, new, limits, seed=seed), SessionStatus.QUEUED.value)
        key, digest = idempotency
        stored = self.keys.dispatch_key(key)
        watched = (stored, *alongside.watch) if alongside is not None else (stored,)
        for _ in range(IDEMPOTENT_TRIES):
            try:
                with self.jobs.watching(*watched) as pipe:
                    raw = pipe.get(stored)
                    if raw is not None:
                        return self._repeat(json.loads(as_text(raw)), digest)
                    if alongside is not None:
                        alongside.check(pipe)
                    pipe.multi()
                    stage = alongside.stage if alongside is not None else None
                    session_id = self._register(pipe, new, limits, (stored, digest), stage, seed)
                    return Dispatched(session_id, SessionStatus.QUEUED.value)
            except redis.WatchError as exc:
                # The key changed under the WATCH (a concurrent dispatch with it won: the next
                # try answers its session), or the connection broke while watching (redis-py
                # reports that as a WatchError too; nothing was written). Either way: again.
                log.info("dispatch with idempotency key %s: %s; trying again", key, exc)
        raise DispatchContended(key)

    def _register(
        self,
        pipe: Pipeline,
        new: NewSession,
        limits: WorkflowLimits,
        idempotency: tuple[str, str] | None = None,
        stage: Callable[[Pipeline, str], None] | None = None,
        seed: Seed | None = None,
    ) -> str:
        session_id = self.registry.create(new, pipeline=pipe)
        queued = SessionQueued(sessionId=session_id, workflowId=new.workflowId, goal=new.goal)
        lines = self.events.stage(pipe, [queued])
        if seed is not None:  # before the job: a worker never claims a session half written
            lines += seed(pipe, session_id)
        self.jobs.enqueue(session_id, limits, pipe)
        if new.parentSessionId is not None:  # the parent's list of children, in spawn order
            children = self.keys.children_of(new.parentSessionId)
            pipe.rpush(children, session_id)
            pipe.expire(children, self.retention_seconds * 2)
        if idempotency is not None:
            key, digest = idempotency
            first = json.dumps({"digest": digest, "sessionId": session_id})
            pipe.set(key, first, ex=self.retention_seconds)
        if stage is not None:
            stage(pipe, session_id)
        pipe.execute()
        self.events.mirror(lines)
        return session_id

    def answered(self, idempotency: tuple[str, str]) -> Dispatched | None:
        """What a dispatch with this (key, digest) answered already (None: the key is new);
        IdempotencyKeyReuse for another digest. A read only: `dispatch` decides under WATCH."""
        key, digest = idempotency
        raw = self.registry.client.get(self.keys.dispatch_key(key))
        return None if raw is None else self._repeat(json.loads(as_text(raw)), digest)

    def _repeat(self, first: dict[str, str], digest: str) -> Dispatched:
        if first.get("digest") != digest:
            raise IdempotencyKeyReuse()
        session_id = first["sessionId"]
        record = self.registry.get(session_id)
        status = record.status.value if record else SessionStatus.QUEUED.value
        return Dispatched(session_id, status, duplicate=True)
