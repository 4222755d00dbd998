"""The Redis side of a fork (README's "Fork a session", daemon/forking/): a source read as it is,
a fork written in its own dispatch transaction, and the source's list of forks.

Exactly once: everything a fork is — its record, its copied history and turn marks, its
steer (accepted by accept.lua itself, offset 1), its events and webhooks, its RQ job, the
source's `forks` entry and the Idempotency-Key's record — is written by ONE MULTI/EXEC, the
dispatch's (daemon/bus/session/dispatch.py, `Seed`). A process killed before EXEC left nothing; one
killed after left the whole fork, and a retry with the same key answers it. Nothing of the
source is changed but its `forks` list (a key of its own: a finished session's record and
streams never change again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
from pydantic import BaseModel

from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.session.dispatch import Seed
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.clock import utc_now_iso
from daemon.host.redisconn import as_text
from daemon.schema.events import SessionForked, SteerAccepted
from daemon.schema.records import SessionRecord, SessionStatus
from daemon.schema.turnmarks import TurnMarks
from daemon.schema.webhookpayloads import SessionFacts


class ForkSummary(BaseModel):
    """A fork as its source's `GET /api/v2/sessions/<id>` lists it."""

    sessionId: str
    turn: int
    status: SessionStatus
    outcome: str | None = None


@dataclass(frozen=True)
class ForkSource:
    """A session about to be forked, as one read found it."""

    record: SessionRecord
    history: list[str]  # the checkpointed messages, JSON each
    marks: TurnMarks


@dataclass(frozen=True)
class ForkWrites:
    """What a fork's dispatch writes besides what every dispatch does (daemon/forking/ plans it)."""

    source: str
    turn: int
    fields: Mapping[str, str | int]  # record fields over the registry's: turnCount, the position
    history: list[str]  # JSON messages: the source's history through the turn's end
    marks: Mapping[str, str]  # the source's turn marks through the turn (a fork of it can fork again)
    steer: str | None
    conversation_only: bool
    facts: SessionFacts  # for its webhooks (its record is written in the same transaction)


class ForkStore:
    def __init__(
        self,
        bus: SteerBus,
        registry: SessionRegistry,
        events: EventSink,
        outbox: WebhookOutbox | None = None,
    ) -> None:
        self.bus = bus
        self.registry = registry
        self.events = events
        self.outbox = outbox

    def read(self, session_id: str) -> ForkSource | None:
        """The session's record, history and turn marks (None: unknown or expired). The history
        and the marks are read in one MULTI: a turn ending meanwhile is in both or neither."""
        record = self.registry.get(session_id)
        if record is None:
            return None
        keys = self.bus.keys
        pipe = self.bus.client.pipeline(transaction=True)
        pipe.lrange(keys.session(session_id).history, 0, -1)
        pipe.hgetall(keys.turns_of(session_id))
        history, marks = pipe.execute()
        raw_marks = {as_text(k): as_text(v) for k, v in marks.items()}
        return ForkSource(record, [as_text(m) for m in history], TurnMarks.parse(raw_marks))

    def outlived(self, session_id: str) -> bool:
        """Whether the session's turn marks are still there though its record is not: its keys
        expired with the retention period, and its marks (which live twice as long) say it
        ran — a session that existed, with no journal left."""
        return bool(self.bus.client.exists(self.bus.keys.turns_of(session_id)))

    def seed(self, writes: ForkWrites) -> Seed:
        """The fork's own writes, for the dispatch's transaction (daemon/bus/session/dispatch.py)."""

        def seed(pipe: redis.client.Pipeline, fork_id: str) -> list[str]:
            keys, ttl = self.bus.keys, 2 * self.bus.retention_seconds
            own = keys.session(fork_id)
            fields: dict[Any, str | int] = dict(writes.fields)  # redis-py's mapping type is invariant
            pipe.hset(own.record, mapping=fields)
            if writes.history:
                pipe.rpush(own.history, *writes.history)
            if writes.marks:
                marks: dict[Any, str] = dict(writes.marks)
                pipe.hset(keys.turns_of(fork_id), mapping=marks)
                pipe.expire(keys.turns_of(fork_id), ttl)
            pipe.rpush(keys.forks_of(writes.source), fork_id)
            pipe.expire(keys.forks_of(writes.source), ttl)
            forked = SessionForked(
                sessionId=fork_id,
                forkOf=writes.source,
                turn=writes.turn,
                conversationOnly=writes.conversation_only,
            )
            lines = self.events.stage(pipe, [forked])
            if self.outbox is not None:
                self.outbox.stage(pipe, fork_id, writes.facts, [forked])
            if writes.steer is not None:
                now = utc_now_iso()
                self.bus.accept_in(pipe, fork_id, writes.steer, now)  # its session stream: accept.lua's
                accepted = SteerAccepted(sessionId=fork_id, turnId=0, offset=1, ts=now)
                lines += self.events.stage(pipe, [accepted], session_streams=False)
            return lines

        return seed


def fork_summaries(client: redis.Redis, registry: SessionRegistry, session_id: str) -> list[ForkSummary]:
    """The session's forks, in the order they were made (expired ones left out)."""
    ids = [as_text(x) for x in client.lrange(registry.keys.forks_of(session_id), 0, -1)]
    return [
        ForkSummary(
            sessionId=record.sessionId,
            turn=record.forkOf.turn if record.forkOf else 0,
            status=record.status,
            outcome=record.outcome,
        )
        for record in registry.get_many(ids)
    ]
