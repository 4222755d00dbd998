"""A trigger's state in Redis (README's Triggers): its poll lease, cursor, ETags and seen
items, what each delivery did, the sessions bound to its keys, its queue and its fires.

Every Redis command of the trigger subsystem is here (daemon/triggers/ holds the logic and
never talks to Redis itself); the keys are daemon.bus.keys.TriggerKeys, the multi-step
changes the `trigger_*.lua` scripts (their KEYS and ARGV in their headers):

- the poll lease (`trigger_lease.lua`, `trigger_release.lua`): one poller per trigger
  across the fleet; a holder that dies loses it when its TTL runs out;
- a poll's outcome (`trigger_polled.lua`): the cursor (forward only), the ETags, when the
  next poll is due and any rate-limit pause, fenced by the lease;
- a fire that starts a session: its writes join the dispatch's MULTI (`alongside`): the
  key's binding (WATCHed: two events for one key start one session), the delivery's
  record, the fire, the counters, the item version seen — all with the session or none;
- any other outcome (`trigger_record.lua`): the delivery's record (SET NX: a redelivery
  finds it and does nothing), the fire, a queued event, the item version seen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict
from redis.client import Pipeline

from daemon.bus.keys import Keys, TriggerKeys
from daemon.bus.replies import per_item
from daemon.bus.scripts import TRIGGER_LEASE, TRIGGER_POLLED, TRIGGER_RECORD, TRIGGER_RELEASE, Registered
from daemon.bus.session.dispatch import Alongside
from daemon.bus.session.registry import record_fields
from daemon.host.clock import utc_now_iso
from daemon.host.redisconn import as_text
from daemon.schema.records import SessionStatus, TriggerItem

FIRES_KEPT = 1000  # the fires stream's approximate cap, per trigger
LIVE = frozenset({SessionStatus.QUEUED.value, SessionStatus.RUNNING.value, SessionStatus.WAITING.value})

FireResult = Literal["started", "steered", "queued", "ignored", "duplicate", "error"]
FIRE_RESULTS: tuple[FireResult, ...] = ("started", "steered", "queued", "ignored", "duplicate", "error")
PollResult = Literal["changed", "not_modified", "error", "rate_limited"]
POLL_RESULTS: tuple[PollResult, ...] = ("changed", "not_modified", "error", "rate_limited")


def digest(text: str) -> str:
    """128-bit hex digest of a key or delivery id: what names their Redis keys (any text)."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class FireRecord(BaseModel):
    """One fire of a trigger: an event (a webhook's, a polled item's) and what it did."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    at: str
    triggerId: str
    deliveryId: str  # the provider's delivery id, or `<item>@<updated_at>` of a poll
    event: str  # issues.labeled, issue_comment.created, pull_request (a poll), ...
    key: str | None = None
    result: FireResult
    firstResult: FireResult | None = None  # duplicate: what the delivery did the first time
    reason: str | None = None  # ignored: why (not an event it takes, whileRunning: ignore)
    sessionId: str | None = None  # started / steered / queued (behind it) / duplicate
    offset: int | None = None  # steered: the steer's offset
    error: str | None = None  # error: the sentence (a template field missing, ...)


class QueuedEvent(BaseModel):
    """An event waiting for its key's session to end (whileRunning: queue), as queued."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    deliveryId: str
    event: str
    key: str
    source: Literal["webhook", "poll"]
    payload: dict[str, Any]
    item: TriggerItem | None = None
    seen: str | None = None  # a poll's item version, marked seen when it fires
    seenMs: int = 0


@dataclass(frozen=True, slots=True)
class Waiting:
    """A queued event and its exact stored JSON (what LREM takes it off the queue by)."""

    raw: str
    event: QueuedEvent


class TriggerState(BaseModel):
    """The hash `wt:{trigger:<id>}`, as GET /api/v2/triggers shows it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    fires: int = 0
    sessionsStarted: int = 0
    lastFireAt: str | None = None
    lastResult: str | None = None
    lastSessionId: str | None = None
    lastError: str | None = None
    lastErrorAt: str | None = None
    polls: int = 0
    lastPollAt: str | None = None
    lastPollResult: str | None = None
    cursor: str | None = None
    cursorMs: int | None = None
    nextPollMs: int | None = None
    pausedUntilMs: int | None = None
    poller: str | None = None  # the lease holder now (not in the hash: the lease key)
    queued: int = 0  # events waiting for their key's session (not in the hash: the list's length)


class BindingChanged(Exception):
    """Another fire bound the key to a session since it was read: read it again."""


class TriggerStore:
    """One trigger subsystem's Redis side (web: webhook fires; worker: polls and queues)."""

    def __init__(self, client: redis.Redis, keys: Keys, retention_seconds: int = 7 * 86400) -> None:
        self.client = client
        self.keys = keys
        self.retention_seconds = retention_seconds
        self._lease = Registered(TRIGGER_LEASE, client)
        self._release = Registered(TRIGGER_RELEASE, client)
        self._polled = Registered(TRIGGER_POLLED, client)
        self._record = Registered(TRIGGER_RECORD, client)

    def of(self, trigger_id: str) -> TriggerKeys:
        return self.keys.trigger(trigger_id)

    # --- the poll lease -----------------------------------------------------------------

    def hold(self, trigger_id: str, holder: str, ttl_ms: int) -> bool:
        """Take the poll lease when free (or renew it when ours): whether we hold it now."""
        return self._lease([self.of(trigger_id).poller], [holder, ttl_ms]).held

    def let_go(self, trigger_id: str, holder: str) -> bool:
        return self._release([self.of(trigger_id).poller], [holder])

    # --- polls --------------------------------------------------------------------------

    def state(self, trigger_id: str) -> TriggerState:
        return self.states([trigger_id])[trigger_id]

    def states(self, trigger_ids: Sequence[str]) -> dict[str, TriggerState]:
        """Each trigger's state, its lease holder and queue length: one pipeline."""
        pipe = self.client.pipeline(transaction=False)
        for trigger_id in trigger_ids:
            keys = self.of(trigger_id)
            pipe.hgetall(keys.state)
            pipe.get(keys.poller)
            pipe.llen(keys.queued)
        found = {}
        for trigger_id, (fields, poller, queued) in zip(
            trigger_ids, per_item(pipe.execute(), 3), strict=True
        ):
            raw = {as_text(k): as_text(v) for k, v in (fields or {}).items() if v not in (None, "")}
            found[trigger_id] = TriggerState.model_validate(
                {**raw, "poller": as_text(poller) if poller else None, "queued": int(queued or 0)}
            )
        return found

    def etags(self, trigger_id: str, urls: Sequence[str]) -> dict[str, str]:
        if not urls:
            return {}
        values: Any = self.client.hmget(self.of(trigger_id).etags, list(urls))
        return {url: as_text(v) for url, v in zip(urls, values, strict=True) if v}

    def seen(self, trigger_id: str, versions: Sequence[str]) -> list[bool]:
        """Whether each item version (`<item id>@<updated_at>`) was handled already."""
        if not versions:
            return []
        scores: Any = self.client.zmscore(self.of(trigger_id).seen, list(versions))
        return [score is not None for score in scores]

    def mark_seen(self, trigger_id: str, versions: dict[str, int]) -> None:
        """Item versions a poll passed over (none of the trigger's events): not judged again."""
        if versions:
            self.client.zadd(self.of(trigger_id).seen, versions)

    def polled(
        self,
        trigger_id: str,
        holder: str,
        *,
        cursor: tuple[str, int] | None,
        etags: dict[str, str],
        next_poll_ms: int,
        paused_until_ms: int,
        result: PollResult,
        error: str | None,
        seen_floor_ms: int,
    ) -> bool:
        """Record a poll (trigger_polled.lua); False when the lease is no longer `holder`'s."""
        keys = self.of(trigger_id)
        text, ms = cursor if cursor is not None else ("", 0)
        args: list[str | int] = [holder, text, ms, json.dumps(etags), utc_now_iso(), next_poll_ms]
        args += [paused_until_ms, result, (error or "")[:500], seen_floor_ms]
        return self._polled([keys.poller, keys.state, keys.etags, keys.seen], args)

    # --- fires --------------------------------------------------------------------------

    def delivery(self, trigger_id: str, delivery_id: str) -> FireRecord | None:
        """What this delivery did before (None: nothing recorded: judge it now)."""
        raw = self.client.get(self.of(trigger_id).delivery(digest(delivery_id)))
        return FireRecord.model_validate_json(as_text(raw)) if raw else None

    def bound(self, trigger_id: str, key: str) -> str | None:
        """The session last started for `key` (live or not)."""
        raw = self.client.get(self.of(trigger_id).binding(digest(key)))
        return as_text(raw) if raw else None

    def live(self, session_id: str) -> bool:
        (status,) = record_fields(self.client, self.keys, session_id, "status")
        return status in LIVE

    def alongside(
        self,
        fire: FireRecord,
        expected: str | None,
        seen: tuple[str, int] | None = None,
        queued: Waiting | None = None,
    ) -> Alongside:
        """The writes of a fire that starts a session, for its dispatch's MULTI: the key bound
        to the session (WATCHed; `check` raises BindingChanged when it is no longer
        `expected`), the delivery's record, the fire, the counters, the item version seen,
        and — for a queued event that fires now — its removal from the queue."""
        assert fire.key is not None
        keys = self.of(fire.triggerId)
        binding = keys.binding(digest(fire.key))

        def check(pipe: Pipeline) -> None:
            current = pipe.get(binding)
            if (as_text(current) if current else None) != expected:
                raise BindingChanged(fire.key)

        def stage(pipe: Pipeline, session_id: str) -> None:
            started = fire.model_copy(update={"sessionId": session_id}).model_dump_json(exclude_none=True)
            pipe.set(binding, session_id, ex=self.retention_seconds)
            pipe.set(keys.delivery(digest(fire.deliveryId)), started, ex=self.retention_seconds)
            pipe.xadd(keys.fires, {"data": started}, maxlen=FIRES_KEPT, approximate=True)
            pipe.hincrby(keys.state, "fires", 1)
            pipe.hincrby(keys.state, "sessionsStarted", 1)
            pipe.hset(
                keys.state,
                mapping={"lastFireAt": fire.at, "lastResult": "started", "lastSessionId": session_id},
            )
            if seen is not None:
                pipe.zadd(keys.seen, {seen[0]: seen[1]})
            if queued is not None:
                pipe.lrem(keys.queued, 1, queued.raw)

        return Alongside(watch=(binding,), check=check, stage=stage)

    def record(
        self,
        fire: FireRecord,
        *,
        keep: bool = True,
        queue: QueuedEvent | None = None,
        seen: tuple[str, int] | None = None,
    ) -> FireRecord | None:
        """Record an outcome that started no session (trigger_record.lua). `keep`: remember
        it for the delivery (a redelivery then does nothing). Returns the first record when
        the delivery was recorded before (nothing written), else None."""
        keys = self.of(fire.triggerId)
        data = fire.model_dump_json(exclude_none=True)
        version, version_ms = seen if seen is not None else ("", 0)
        first = self._record(
            [keys.delivery(digest(fire.deliveryId)), keys.state, keys.fires, keys.queued, keys.seen],
            [
                data,
                self.retention_seconds if keep else 0,
                FIRES_KEPT,
                fire.at,
                fire.result,
                queue.model_dump_json() if queue is not None else "",
                version,
                version_ms,
                (fire.error or "")[:500],
            ],
        )
        return FireRecord.model_validate_json(first) if first is not None else None

    def queued(self, trigger_id: str, limit: int = 100) -> list[Waiting]:
        """The events waiting for their key's session, oldest first."""
        raw: Any = self.client.lrange(self.of(trigger_id).queued, 0, max(limit, 1) - 1)
        return [Waiting(as_text(item), QueuedEvent.model_validate_json(as_text(item))) for item in raw]

    def drop_queued(self, trigger_id: str, waiting: Waiting) -> None:
        """Take an event off the queue that will never fire (it no longer renders)."""
        self.client.lrem(self.of(trigger_id).queued, 1, waiting.raw)

    def final_notes(self, session_id: str, scan: int = 200) -> str | None:
        """The notes of the last step the session completed (its `step_advanced` events, the
        newest of the last `scan`): what a report-back comment quotes."""
        entries: Any = self.client.xrevrange(self.keys.session(session_id).events, count=scan)
        for _, fields in entries:
            event = json.loads(as_text(fields.get("data") or "{}"))
            if event.get("kind") == "step_advanced" and event.get("notes"):
                return str(event["notes"])
        return None

    def fires(self, trigger_id: str, limit: int = 50) -> list[FireRecord]:
        """The newest fires first."""
        entries: Any = self.client.xrevrange(self.of(trigger_id).fires, count=max(limit, 1))
        return [FireRecord.model_validate_json(as_text(fields["data"])) for _, fields in entries]
