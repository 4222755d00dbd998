"""Webhook deliveries in Redis (README's Webhooks): queued with their event, taken by any sender.

Where a delivery lives (daemon.bus.keys.WebhookKeys, docs/redis.md):
- queued by emit.lua in the same run that appends its event (`WebhookOutbox.queue_for`
  builds that run's ARGV[4]): its record in `wt:{webhooks}:deliveries`, due at once in
  `wt:{webhooks}:due`, in the log `wt:{webhooks}:log`, and in its session's list;
- taken by a sender (webhook_claim.lua: due now → out of the others' reach for a claim
  period, so a sender that dies mid-try leaves it due again: at least once);
- settled by that sender (webhook_settle.lua): delivered (2xx), due again later (retry), or
  given up (`wt:{webhooks}:failed`).
Nothing of it lives in a process: a restart of every process finds every pending delivery
where it was. Records older than the retention period are pruned by the senders.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict

from daemon.bus.keys import Keys
from daemon.bus.scripts import WEBHOOK_CLAIM, WEBHOOK_SETTLE, Registered
from daemon.host.clock import epoch_ms, utc_now_iso
from daemon.host.redisconn import as_text
from daemon.schema.events import CoordinatorSignal, EventBase
from daemon.schema.webhookpayloads import (
    NewDelivery,
    SessionFacts,
    WebhookRouting,
    WebhookType,
    build_deliveries,
    webhook_type,
)

log = logging.getLogger(__name__)

DeliveryState = Literal["pending", "delivered", "failed"]
SettleResult = Literal["delivered", "retry", "failed"]
FACT_FIELDS = (
    "workflowId",
    "goal",
    "callbackUrl",
    "parentSessionId",
    "inputTokens",
    "outputTokens",
    "cacheReadTokens",
    "cacheWriteTokens",
    "costUsd",
    "trigger",
)


class DeliveryView(BaseModel):
    """One delivery as the API, the CLI and the console show it (its body left out)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    type: WebhookType
    url: str
    sessionId: str
    state: DeliveryState = "pending"
    attempts: int = 0
    createdAt: str
    createdMs: int
    lastAttemptAt: str | None = None
    lastStatus: int | None = None  # the receiver's HTTP status; None: no answer
    lastError: str | None = None  # timeout, connection refused, ...
    responseExcerpt: str | None = None  # the start of the receiver's body (capped)
    deliveredAt: str | None = None
    failedAt: str | None = None


class WebhookDelivery(DeliveryView):
    """One delivery's record (the hash `wt:{webhooks}:deliveries`): the view and its body."""

    body: str  # the exact JSON POSTed (signed as is)

    def view(self) -> DeliveryView:
        return DeliveryView.model_validate(self.model_dump(exclude={"body"}))


class WebhookOutbox:
    """The fleet's webhook deliveries: queued by attempts, taken and settled by senders."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        routing: WebhookRouting | None = None,
        retention_seconds: int = 7 * 86400,
    ) -> None:
        self.client = client
        self.keys = keys
        self.routing = routing or WebhookRouting()
        self.retention_seconds = retention_seconds
        self._claim = Registered(WEBHOOK_CLAIM, client)
        self._settle = Registered(WEBHOOK_SETTLE, client)

    # --- queueing (a running attempt, through emit.lua) --------------------------------

    def queue_for(self, session_id: str, events: Sequence[EventBase]) -> tuple[str, tuple[str, ...]]:
        """emit.lua's ARGV[4] and KEYS[9..12] for a batch: '' and () when nothing in it
        notifies, or the session has no receiver. Reads the record's facts (one HMGET) only
        for a batch that notifies; raises redis.RedisError like the emit itself would."""
        if not any(webhook_type(event) is not None for event in events):
            return "", ()
        deliveries = self.deliveries_for(session_id, events)
        if not deliveries:
            return "", ()
        now = epoch_ms()
        items = [
            {"id": d.id, "due": now, "record": self._new_record(d, now).model_dump_json()} for d in deliveries
        ]
        queued = json.dumps({"ttl": self.retention_seconds * 2, "items": items})
        hooks = self.keys.webhooks
        return queued, (hooks.deliveries, hooks.due, hooks.log, self.keys.webhooks_of(session_id))

    def deliveries_for(self, session_id: str, events: Sequence[EventBase]) -> list[NewDelivery]:
        facts = self.facts(session_id)
        if not self.routing.notifies(facts):
            return []
        offsets = [e.offset for e in events if isinstance(e, CoordinatorSignal) and e.wait]
        data = self.signal_data(session_id, offsets) if offsets else None
        return build_deliveries(events, facts, self.routing, data)

    def facts(self, session_id: str) -> SessionFacts:
        values: Any = self.client.hmget(self.keys.session(session_id).record, list(FACT_FIELDS))
        raw = {name: as_text(v) for name, v in zip(FACT_FIELDS, values, strict=True) if v not in (None, "")}
        return SessionFacts.model_validate(raw)

    def signal_data(self, session_id: str, offsets: list[int]) -> dict[int, Any]:
        """The `data` of the session's newest signals with these offsets."""
        entries: Any = self.client.xrevrange(self.keys.signals_of(session_id), count=5)
        found: dict[int, Any] = {}
        for _, fields in entries:
            offset = int(fields.get("offset") or 0)
            if offset in offsets:
                found[offset] = json.loads(fields.get("data") or "{}").get("data")
        return found

    @staticmethod
    def _new_record(delivery: NewDelivery, now_ms: int) -> WebhookDelivery:
        return WebhookDelivery(
            id=delivery.id,
            type=delivery.type,
            url=delivery.url,
            sessionId=delivery.sessionId,
            body=delivery.body,
            createdAt=utc_now_iso(),
            createdMs=now_ms,
        )

    def queue_now(self, session_id: str, events: Sequence[EventBase]) -> int:
        """Queue without an emit.lua run: for events a coordinator-side path records itself
        (a cancel that ends a queued session). One MULTI. Returns how many were queued."""
        queued, _ = self.queue_for(session_id, events)
        if not queued:
            return 0
        items = json.loads(queued)["items"]
        pipe = self.client.pipeline(transaction=True)
        self._write(pipe, session_id, items)
        pipe.execute()
        return len(items)

    def stage(
        self, pipe: redis.client.Pipeline, session_id: str, facts: SessionFacts, events: Sequence[EventBase]
    ) -> int:
        """Queue these events' webhooks in a caller's transaction, from `facts` given rather
        than read (a session being dispatched: its record is written in that same
        transaction). Returns how many were staged."""
        if not any(webhook_type(event) is not None for event in events) or not self.routing.receivers(facts):
            return 0
        now = epoch_ms()
        deliveries = build_deliveries(events, facts, self.routing)
        items = [
            {"id": d.id, "due": now, "record": self._new_record(d, now).model_dump_json()} for d in deliveries
        ]
        self._write(pipe, session_id, items)
        return len(items)

    def _write(self, pipe: redis.client.Pipeline, session_id: str, items: list[dict[str, Any]]) -> None:
        """What emit.lua writes for queued deliveries, as pipeline commands."""
        hooks, own = self.keys.webhooks, self.keys.webhooks_of(session_id)
        for item in items:
            pipe.hset(hooks.deliveries, item["id"], item["record"])
            pipe.zadd(hooks.due, {item["id"]: item["due"]})
            pipe.zadd(hooks.log, {item["id"]: item["due"]})
            pipe.rpush(own, item["id"])
        pipe.expire(own, self.retention_seconds * 2)

    # --- sending (daemon/webhooks/sender.py) ------------------------------------------

    def claim(self, now_ms: int, claim_ms: int, limit: int) -> list[WebhookDelivery]:
        """The deliveries due now (at most `limit`), each kept from other senders for
        `claim_ms`."""
        taken = self._claim(self.keys.webhooks.all(), [now_ms, claim_ms, limit])
        return [WebhookDelivery.model_validate_json(record) for record in taken]

    def settle(
        self, delivery: WebhookDelivery, result: Literal["delivered", "retry", "failed"], at_ms: int
    ) -> bool:
        """Store a try's result; False when another sender had settled it for good already."""
        return self._settle(
            self.keys.webhooks.all(), [delivery.id, delivery.model_dump_json(), result, at_ms]
        )

    def prune(self, now_ms: int) -> int:
        """Forget deliveries queued longer than the retention period ago (settled or not)."""
        hooks = self.keys.webhooks
        old = [
            as_text(i)
            for i in self.client.zrangebyscore(hooks.log, "-inf", now_ms - self.retention_seconds * 1000)
        ]
        if not old:
            return 0
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(hooks.deliveries, *old)
        for key in (hooks.due, hooks.log, hooks.failed):
            pipe.zrem(key, *old)
        pipe.execute()
        return len(old)

    # --- reading (CLI, API, console) ---------------------------------------------------

    def get(self, ids: Sequence[str]) -> list[WebhookDelivery]:
        if not ids:
            return []
        raw: Any = self.client.hmget(self.keys.webhooks.deliveries, list(ids))
        return [WebhookDelivery.model_validate_json(as_text(r)) for r in raw if r is not None]

    def recent(self, limit: int = 50, failed: bool = False) -> list[WebhookDelivery]:
        """Newest first: every delivery kept, or only the ones given up."""
        index = self.keys.webhooks.failed if failed else self.keys.webhooks.log
        return self.get([as_text(i) for i in self.client.zrevrange(index, 0, max(limit, 1) - 1)])

    def of_session(self, session_id: str) -> list[WebhookDelivery]:
        """A session's deliveries, in the order they were queued."""
        return self.get([as_text(i) for i in self.client.lrange(self.keys.webhooks_of(session_id), 0, 999)])

    def pending_count(self) -> int:
        return int(self.client.zcard(self.keys.webhooks.due))
