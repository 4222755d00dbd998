"""Session trees (README's Sub-agents and questions): who spawned whom, what the children did, and a
cancel that cascades.

A child's record carries `parentSessionId`, `rootSessionId` and `depth`; its parent's list
`wt:session:{parent}:children` (daemon.bus.keys.Keys.children_of) names its children in
spawn order, written in the child's dispatch MULTI (daemon/bus/session/dispatch.py). What a parent
learns of a child (`ChildResult`) is folded from the child's own event stream: its last
`step_advanced` notes and artifacts, its `issue_reported` summaries.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

import redis
from pydantic import BaseModel

from daemon.bus.keys import Keys
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import STREAM_FIELD, EventSink
from daemon.host.redisconn import as_text
from daemon.schema.events import EventBase, ending_events
from daemon.schema.records import SessionStatus

log = logging.getLogger(__name__)

MAX_TREE = 2_000  # sessions one cascade visits at most (50 a session, a few levels)


class Emits(Protocol):
    def emit(self, *events: EventBase) -> None: ...


class ChildSummary(BaseModel):
    """A child as `GET /api/v2/sessions/<id>` lists it."""

    sessionId: str
    workflowId: str
    status: SessionStatus
    outcome: str | None = None
    depth: int = 0


class ChildResult(ChildSummary):
    """A child as the parent's `spawn_agent` result reports it."""

    notes: str = ""  # its last continue_workflow notes
    artifacts: list[dict[str, Any]] = []
    issues: list[str] = []  # the summaries of the issues it reported


class SessionTree:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def children(self, session_id: str) -> list[str]:
        return [as_text(x) for x in self.client.lrange(self.keys.children_of(session_id), 0, -1)]

    def statuses(self, session_ids: list[str]) -> dict[str, SessionStatus | None]:
        """Each session's status in one round trip (None: its record is gone)."""
        pipe = self.client.pipeline(transaction=False)
        for session_id in session_ids:
            pipe.hget(self.keys.session(session_id).record, "status")
        replies = pipe.execute() if session_ids else []
        return {
            sid: SessionStatus(as_text(raw)) if raw else None
            for sid, raw in zip(session_ids, replies, strict=True)
        }

    def summaries(self, session_id: str) -> list[ChildSummary]:
        ids = self.children(session_id)
        pipe = self.client.pipeline(transaction=False)
        for child in ids:
            pipe.hmget(self.keys.session(child).record, "workflowId", "status", "outcome", "depth")
        found: list[ChildSummary] = []
        for child, (workflow, status, outcome, depth) in zip(ids, pipe.execute() if ids else [], strict=True):
            if status is None:
                continue  # expired
            found.append(
                ChildSummary(
                    sessionId=child,
                    workflowId=as_text(workflow or ""),
                    status=SessionStatus(as_text(status)),
                    outcome=as_text(outcome) if outcome else None,
                    depth=int(as_text(depth or 0)),
                )
            )
        return found

    def result(self, child_id: str) -> ChildResult:
        """What the parent is told of one child: its record's status and outcome, and its notes,
        artifacts and issues from its event stream."""
        keys = self.keys.session(child_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(keys.record, "workflowId", "status", "outcome", "depth")
        pipe.xrange(keys.events)
        (workflow, status, outcome, depth), entries = pipe.execute()
        notes, artifacts, issues = "", list[dict[str, Any]](), list[str]()
        for _, fields in entries:
            event = json.loads(fields.get(STREAM_FIELD) or "{}")
            if event.get("kind") == "step_advanced":
                notes = event.get("notes") or notes
                artifacts = event.get("artifacts") or artifacts
            elif event.get("kind") == "issue_reported":
                issues.append(f"{event.get('severity')}: {event.get('summary')}")
        return ChildResult(
            sessionId=child_id,
            workflowId=as_text(workflow or ""),
            status=SessionStatus(as_text(status)) if status else SessionStatus.FAILED,
            outcome=as_text(outcome) if outcome else ("expired" if status is None else None),
            depth=int(as_text(depth or 0)),
            notes=notes,
            artifacts=artifacts,
            issues=issues,
        )

    def descendants(self, session_id: str) -> list[str]:
        """Every session below this one, breadth first."""
        found: list[str] = []
        level = [session_id]
        while level and len(found) < MAX_TREE:
            pipe = self.client.pipeline(transaction=False)
            for parent in level:
                pipe.lrange(self.keys.children_of(parent), 0, -1)
            level = [as_text(child) for reply in pipe.execute() for child in reply]
            found.extend(level)
        return found[:MAX_TREE]


def cancel_session(bus: SteerBus, registry: SessionRegistry, events: Emits, session_id: str) -> str:
    """Cancel one session (cancel.lua): `not_found` | `finished` | `requested` | `cancelled`.
    A queued session no worker held ends here and now: its index entry and ending events."""
    outcome, undelivered = bus.cancel(session_id)
    if outcome == "cancelled":
        registry.mark_finished(session_id, bus.retention_seconds)
        cancelled = SessionStatus.CANCELLED.value
        ending = ending_events(session_id, cancelled, "cancelled", "cancelled while queued", undelivered)
        events.emit(*ending)
        webhooks = events.webhooks if isinstance(events, EventSink) else None
        if webhooks is not None:  # session.finished (README's Webhooks): no worker ever ran it
            try:
                webhooks.queue_now(session_id, ending)
            except redis.RedisError as exc:
                log.warning("session %s: webhooks of its cancel not queued: %s", session_id, exc)
    return outcome


def cancel_descendants(
    bus: SteerBus, registry: SessionRegistry, events: Emits, tree: SessionTree, session_id: str
) -> list[str]:
    """A cancel cascades (README's Sub-agents and questions): every live session below this one is cancelled.
    Returns the ids a cancel was recorded for."""
    cancelled: list[str] = []
    for child in tree.descendants(session_id):
        try:
            if cancel_session(bus, registry, events, child) in ("requested", "cancelled"):
                cancelled.append(child)
        except redis.RedisError:
            log.exception(
                "cancel of %s (below %s) failed; its own parent's wait cascades again", child, session_id
            )
    return cancelled
