"""A fire (README's Triggers): an event a trigger takes becomes a session, a steer, a queued
event or nothing — once per delivery, fleet-wide, whichever process sees it.

The order of decisions:
1. the trigger's `events` and `filter` (matching.py): not taken → `ignored`, nothing kept;
2. the delivery seen before (its record in Redis) → `duplicate`: what it did the first time;
3. the templates render over the event (a missing field → `error`, said on the fire);
4. the key's session: none live → a dispatch, through the same `prepare` + `Dispatcher` as
   `POST /api/v2/auto/dispatch`, the delivery id as its Idempotency-Key, and the key's
   binding WATCHed in its transaction (two events for one key start one session: the
   loser reads the binding again and meets the winner's live session);
   one live → `whileRunning`: `steer` (the event's text, its clientMsgId the delivery: a
   redelivery is a duplicate steer), `queue` (fired when that session ends: runner.py) or
   `ignore`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import redis

from daemon.bus.fleet.metrics import NULL_RECORDER, TRIGGER_FIRES, MetricsRecorder
from daemon.bus.fleet.triggers import BindingChanged, FireRecord, QueuedEvent, TriggerStore, Waiting, digest
from daemon.bus.session.dispatch import (
    AgentConfigRefused,
    DispatchContended,
    Dispatcher,
    IdempotencyKeyReuse,
    SessionRequest,
    UnknownWorkflow,
    WorkflowUnrunnable,
    prepare,
)
from daemon.bus.session.steerbus import SteerBus, SteerOutcome
from daemon.bus.streams.eventsink import EventSink
from daemon.host.clock import utc_now_iso
from daemon.schema.events import SteerAccepted
from daemon.schema.records import TriggerItem, TriggerOrigin
from daemon.triggers.events import Facts, TriggerEvent
from daemon.triggers.loading import Trigger
from daemon.triggers.matching import refusal
from daemon.triggers.providers import provider
from daemon.triggers.templates import RenderError, render_context
from daemon.workflows import Catalog

log = logging.getLogger(__name__)

MAX_GOAL_BYTES = 32 * 1024  # as a dispatch's (README's HTTP API): a longer goal is cut
MAX_CONTEXT_BYTES = 256 * 1024
PLACE_TRIES = 4  # a key's session ending, or another fire binding it, between two reads


@dataclass(frozen=True)
class Rendered:
    goal: str
    context: dict[str, Any] | None
    key: str


class Firing:
    """Fires a trigger's events; one per process (the web for webhooks, the worker for polls)."""

    def __init__(
        self,
        store: TriggerStore,
        dispatcher: Dispatcher,
        bus: SteerBus,
        catalog: Catalog,
        events: EventSink,
        metrics: MetricsRecorder = NULL_RECORDER,
        max_steer_bytes: int = 32768,
        max_pending: int = 0,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.bus = bus
        self.catalog = catalog
        self.events = events
        self.metrics = metrics
        self.max_steer_bytes = max_steer_bytes
        self.max_pending = max_pending

    def fire(self, trigger: Trigger, event: TriggerEvent) -> FireRecord:
        """What the event did (raises redis.RedisError when Redis is out of reach)."""
        spec = trigger.spec
        base = FireRecord(
            at=utc_now_iso(),
            triggerId=spec.id,
            deliveryId=event.delivery_id,
            event=event.name,
            result="ignored",
        )
        why = refusal(spec, event)
        if why is not None:
            ignored = base.model_copy(update={"reason": why})
            self.store.record(ignored, keep=False, seen=event.version)
            return self._counted(ignored)
        first = self.store.delivery(spec.id, event.delivery_id)
        if first is not None:
            return self._counted(_again(first))
        try:
            rendered = render(trigger, event)
        except RenderError as exc:
            return self._error(base, str(exc))
        return self._place(trigger, event, base.model_copy(update={"key": rendered.key}), rendered)

    def fire_queued(self, trigger: Trigger, waiting: Waiting) -> FireRecord | None:
        """A queued event whose key may be free now: dispatched, or None (its session lives on)."""
        queued = waiting.event
        bound = self.store.bound(trigger.id, queued.key)
        if bound is not None and self.store.live(bound):
            return None
        event = TriggerEvent(
            queued.event, queued.deliveryId, queued.payload, queued.source, queued.item, Facts(),
            (queued.seen, queued.seenMs) if queued.seen else None,
        )  # fmt: skip
        base = FireRecord(
            at=utc_now_iso(), triggerId=trigger.id, deliveryId=queued.deliveryId, event=queued.event,
            key=queued.key, result="started",
        )  # fmt: skip
        try:
            rendered = render(trigger, event)
        except RenderError as exc:
            self.store.drop_queued(trigger.id, waiting)
            return self._error(base, str(exc))
        fired = self._start(trigger, event, base, rendered, bound, waiting)
        if fired is None:  # another event bound the key meanwhile: stay queued behind its session
            return None
        if fired.result in ("duplicate", "error"):  # started before, or never will: off the queue
            self.store.drop_queued(trigger.id, waiting)
        return self._counted(fired)

    # --- placing a rendered event ---------------------------------------------------------

    def _place(
        self, trigger: Trigger, event: TriggerEvent, fire: FireRecord, rendered: Rendered
    ) -> FireRecord:
        for _ in range(PLACE_TRIES):
            bound = self.store.bound(trigger.id, rendered.key)
            if bound is not None and self.store.live(bound):
                placed = self._while_running(trigger, event, fire, bound)
            else:
                placed = self._start(trigger, event, fire, rendered, bound)
            if placed is not None:
                return self._counted(placed)
        return self._error(fire, "the key's session kept changing; the event was not placed")

    def _start(
        self,
        trigger: Trigger,
        event: TriggerEvent,
        fire: FireRecord,
        rendered: Rendered,
        bound: str | None,
        waiting: Waiting | None = None,
    ) -> FireRecord | None:
        """Dispatch a session for the key (None: the key was bound by another fire meanwhile)."""
        spec = trigger.spec
        origin = TriggerOrigin(
            triggerId=spec.id, key=rendered.key, event=event.name, deliveryId=event.delivery_id,
            item=event.item, commentsUrl=comments_url(trigger, event.item),
        )  # fmt: skip
        try:
            new, limits = prepare(self.catalog, session_request(trigger, rendered), origin)
        except (UnknownWorkflow, WorkflowUnrunnable, AgentConfigRefused) as exc:
            return self._error(fire, f"the session cannot start: {type(exc).__name__}: {exc}", counted=False)
        started = fire.model_copy(update={"result": "started"})
        idempotency = (dispatch_key(spec.id, event.delivery_id), digest(f"{spec.id}\n{event.delivery_id}"))
        try:
            done = self.dispatcher.dispatch(
                new, limits, idempotency, self.store.alongside(started, bound, event.version, waiting)
            )
        except BindingChanged:
            return None
        except (IdempotencyKeyReuse, DispatchContended) as exc:
            return self._error(fire, f"dispatch refused: {type(exc).__name__}", counted=False)
        if done.duplicate:
            return fire.model_copy(
                update={"result": "duplicate", "firstResult": "started", "sessionId": done.session_id}
            )
        log.info(
            "trigger %s: %s %s started session %s", spec.id, event.name, event.delivery_id, done.session_id
        )
        return started.model_copy(update={"sessionId": done.session_id})

    def _while_running(
        self, trigger: Trigger, event: TriggerEvent, fire: FireRecord, session_id: str
    ) -> FireRecord | None:
        spec = trigger.spec
        if spec.whileRunning == "ignore":
            reason = f"whileRunning: ignore (session {session_id} is live)"
            ignored = fire.model_copy(update={"result": "ignored", "reason": reason, "sessionId": session_id})
            return self._recorded(ignored, seen=event.version)
        if spec.whileRunning == "queue":
            queued = fire.model_copy(update={"result": "queued", "sessionId": session_id})
            assert fire.key is not None
            seen, seen_ms = event.version if event.version is not None else (None, 0)
            waiting = QueuedEvent(
                deliveryId=event.delivery_id, event=event.name, key=fire.key, source=event.source,
                payload=event.payload, item=event.item, seen=seen, seenMs=seen_ms,
            )  # fmt: skip
            return self._recorded(queued, queue=waiting)
        return self._steer(trigger, event, fire, session_id)

    def _steer(
        self, trigger: Trigger, event: TriggerEvent, fire: FireRecord, session_id: str
    ) -> FireRecord | None:
        try:
            text = steer_text(trigger, event, self.max_steer_bytes)
        except RenderError as exc:
            return self._error(fire, str(exc), counted=False)
        msg_id = steer_msg_id(trigger.id, event.delivery_id)
        result = self.bus.accept(session_id, text, client_msg_id=msg_id, max_pending=self.max_pending)
        if result.outcome is SteerOutcome.NOT_FOUND:
            return None  # it ended meanwhile: the key is free, place the event again
        if result.outcome not in (
            SteerOutcome.ACCEPTED,
            SteerOutcome.DUPLICATE,
            SteerOutcome.CLIENT_MSG_ID_REUSE,
        ):
            return self._error(fire, f"the steer was refused ({result.outcome.value})", counted=False)
        offset = result.ref.offset if result.ref is not None else None
        if result.outcome is SteerOutcome.ACCEPTED and result.ref is not None:
            accepted = SteerAccepted(
                sessionId=session_id, turnId=result.ref.turnId, offset=result.ref.offset,
                clientMsgId=msg_id, ts=result.accepted_at or utc_now_iso(),
            )  # fmt: skip
            self.events.write([accepted], session_streams=False)  # accept.lua wrote the session's own
        steered = fire.model_copy(update={"result": "steered", "sessionId": session_id, "offset": offset})
        return self._recorded(steered, seen=event.version)

    # --- recording --------------------------------------------------------------------------

    def _recorded(
        self, fire: FireRecord, queue: QueuedEvent | None = None, seen: tuple[str, int] | None = None
    ) -> FireRecord:
        first = self.store.record(fire, queue=queue, seen=seen)
        return _again(first) if first is not None else fire

    def _error(self, fire: FireRecord, sentence: str, counted: bool = True) -> FireRecord:
        log.warning("trigger %s: %s %s: %s", fire.triggerId, fire.event, fire.deliveryId, sentence)
        failed = fire.model_copy(update={"result": "error", "error": sentence[:500]})
        try:
            self.store.record(failed, keep=False)
        except redis.RedisError as exc:
            log.warning("trigger %s: the error was not recorded: %s", fire.triggerId, exc)
        return self._counted(failed) if counted else failed

    def _counted(self, fire: FireRecord) -> FireRecord:
        self.metrics.count(TRIGGER_FIRES, trigger=fire.triggerId, result=fire.result)
        return fire


def _again(first: FireRecord) -> FireRecord:
    """A repeated delivery's answer: what the first one did, said as a duplicate."""
    was = first.firstResult or first.result
    return first.model_copy(update={"result": "duplicate", "firstResult": was, "at": utc_now_iso()})


def steer_msg_id(trigger_id: str, delivery_id: str) -> str:
    """The clientMsgId of a delivery's steer: a redelivery is a duplicate steer."""
    return "trigger-" + digest(trigger_id + "\n" + delivery_id)


def dispatch_key(trigger_id: str, delivery_id: str) -> str:
    """The Idempotency-Key of a delivery's dispatch (README's HTTP API shape)."""
    return f"trg:{trigger_id}:{digest(delivery_id)}"


def default_key(event: TriggerEvent) -> str:
    """What a session is about when the trigger has no `key`: its item, else the delivery."""
    item = event.item
    if item is not None and item.repo is not None and item.number is not None:
        mark = "!" if item.kind == "merge_request" else "#"
        return f"{item.provider}:{item.repo}{mark}{item.number}"
    return f"delivery:{event.delivery_id}"


def render(trigger: Trigger, event: TriggerEvent) -> Rendered:
    variables = event.variables(trigger.id)
    goal = trigger.goal.render(variables).strip()
    if not goal:
        raise RenderError("goal: renders to an empty text")
    if len(goal.encode()) > MAX_GOAL_BYTES:
        goal = goal.encode()[: MAX_GOAL_BYTES - 4].decode(errors="ignore") + " …"
    context = render_context(trigger.context, variables) if trigger.context is not None else None
    if context is not None and len(json.dumps(context, separators=(",", ":"))) > MAX_CONTEXT_BYTES:
        raise RenderError(f"context: renders to more than {MAX_CONTEXT_BYTES} bytes of JSON")
    key = trigger.key.render(variables).strip() if trigger.key is not None else default_key(event)
    if not key:
        raise RenderError("key: renders to an empty text")
    return Rendered(goal, context, key[:500])


def steer_text(trigger: Trigger, event: TriggerEvent, max_bytes: int) -> str:
    if trigger.steer is not None:
        text = trigger.steer.render(event.variables(trigger.id)).strip()
    else:
        text = provider(trigger.spec.source).describe(event)
    text = text or f"{event.name} ({event.delivery_id})"
    if len(text.encode()) > max_bytes:
        text = text.encode()[: max_bytes - 4].decode(errors="ignore") + " …"
    return text


def session_request(trigger: Trigger, rendered: Rendered) -> SessionRequest:
    spec = trigger.spec
    return SessionRequest(
        workflowId=spec.workflowId, goal=rendered.goal, workspacePath=spec.workspacePath,
        context=rendered.context, gates=spec.gates, branchStrategy=spec.branchStrategy,
        delivery=spec.delivery, baseRef=spec.baseRef, keepWorktree=spec.keepWorktree,
        agentConfig=spec.agentConfig, callbackUrl=spec.callbackUrl,
    )  # fmt: skip


def comments_url(trigger: Trigger, item: TriggerItem | None) -> str | None:
    """reportBack: comment: the item's comments (GitHub) or notes (GitLab) on the trigger's API."""
    if trigger.spec.reportBack != "comment" or item is None:
        return None
    return provider(trigger.spec.source).comments_url(trigger.spec.api_url, item)
