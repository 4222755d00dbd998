"""Every Redis key WorkTrain uses, built in one place (docs/redis.md; documented in docs/redis.md).

Per-session keys put the session id in a hash tag (`wt:session:{sess_…}:…`) so one session's
keys share a Redis Cluster slot and its Lua scripts stay cluster-legal. Nothing else in the
code base formats a key: a session id that fails validation never becomes part of one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.host.ids import require_idempotency_key, require_session_id, require_trigger_id

QUEUE_NAME = "worktrain"
_HEX_DIGEST = re.compile(r"^[0-9a-f]{32}$")


def _hex_digest(value: str) -> str:
    """A 128-bit hex digest (daemon.bus.fleet.triggers.digest): text from outside never names a key."""
    if _HEX_DIGEST.fullmatch(value) is None:
        raise ValueError(f"not a hex digest: {value[:80]!r}")
    return value


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The keys of one session, all in the `{sess_…}` hash-tag slot."""

    record: str  # hash: the session record (README's HTTP API)
    pending: str  # list: accepted steers waiting for the next turn end, one JSON each
    inflight: str  # list: steers drained at a turn end but not yet checkpointed (docs/durability.md)
    journal: str  # stream: every accept, delivery and non-delivery, durable
    dedup: str  # hash: clientMsgId -> JSON {digest, turnId, offset}, the session's lifetime
    events: str  # stream: this session's events
    history: str  # list: the checkpointed message history, one JSON message each
    lease: str  # string with PX TTL: the worker id that runs the session now

    def all(self) -> tuple[str, ...]:
        return (
            self.record,
            self.pending,
            self.inflight,
            self.journal,
            self.dedup,
            self.events,
            self.history,
            self.lease,
        )


@dataclass(frozen=True, slots=True)
class SlotKeys:
    """The fleet-wide model-call semaphore (WORKTRAIN_MAX_MODEL_CALLS), in one hash-tag slot."""

    holders: str  # sorted set: call token -> expiry (ms): the model calls in flight
    queue: str  # sorted set: call token -> ticket: who waits for a slot, in arrival order
    waiters: str  # sorted set: call token -> expiry (ms) of its place in the line
    ticket: str  # string: the last ticket handed out
    released: str  # pub/sub channel (not a key): the tokens whose turn it is, after a release

    def all(self) -> tuple[str, ...]:
        return (self.holders, self.queue, self.waiters, self.ticket)


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder for one prefix (`WORKTRAIN_REDIS_PREFIX`, default `wt`)."""

    prefix: str = "wt"

    def session(self, session_id: str) -> SessionKeys:
        base = f"{self.prefix}:session:{{{require_session_id(session_id)}}}"
        return SessionKeys(
            record=base,
            pending=f"{base}:steer",
            inflight=f"{base}:inflight",
            journal=f"{base}:steers",
            dedup=f"{base}:dedup",
            events=f"{base}:events",
            history=f"{base}:history",
            lease=f"{base}:lease",
        )

    @property
    def sessions(self) -> str:
        """Sorted set of every session id, scored by creation time in ms."""
        return f"{self.prefix}:sessions"

    @property
    def active(self) -> str:
        """Sorted set of sessions not yet finished (queued/running/waiting), scored by creation."""
        return f"{self.prefix}:sessions:active"

    @property
    def expiring(self) -> str:
        """Sorted set of finished sessions, scored by when their keys expire (ms since the
        epoch): the index entries that must leave `sessions` with them."""
        return f"{self.prefix}:sessions:expiring"

    def dispatch_key(self, idempotency_key: str) -> str:
        """String: what one dispatch `Idempotency-Key` answered (README's HTTP API), JSON
        {"digest", "sessionId"}, kept for the retention period. The key must already match
        daemon.host.ids.CLIENT_MSG_ID_RE (no `{`, `}` or spaces)."""
        return f"{self.prefix}:dispatch:{require_idempotency_key(idempotency_key)}"

    @property
    def issues(self) -> str:
        return f"{self.prefix}:issues"

    @property
    def events(self) -> str:
        return f"{self.prefix}:events"

    @property
    def reaper_lock(self) -> str:
        return f"{self.prefix}:reaper:lock"

    @property
    def replication_barrier(self) -> str:
        """A counter INCRed right before `WAIT` (daemon/bus/replication.py): the write that
        makes the asking connection's offset cover every write made before it."""
        return f"{self.prefix}:replication:barrier"

    @property
    def interrupts(self) -> str:
        """Pub/Sub channel (not a key): `accept.lua` publishes `<sessionId> <turnId>` when an
        interrupt steer lands on a live turn; one listener per worker process wakes the
        session (daemon/bus/session/interruptlistener.py). A hint only: the record's `interruptTurn`
        is the truth, which the heartbeat also reports."""
        return f"{self.prefix}:interrupts"

    @property
    def model_slots(self) -> SlotKeys:
        base = f"{self.prefix}:{{model-slots}}"
        return SlotKeys(
            holders=f"{base}:holders",
            queue=f"{base}:queue",
            waiters=f"{base}:waiters",
            ticket=f"{base}:ticket",
            released=f"{base}:released",
        )

    # --- coordinator signals and sub-agents (README's Sub-agents and questions) ----------------------------

    def signals_of(self, session_id: str) -> str:
        """Stream: one session's coordinator signals (`signal_coordinator`), in its hash-tag
        slot; field `offset` (1, 2, 3 ...) and `data` (the signal JSON). Written by
        signal.lua with the fence, as its KEYS[9]."""
        return f"{self.session(session_id).record}:signals"

    @property
    def signals(self) -> str:
        """Stream: every session's coordinator signals (trimmed `MAXLEN ~`), field `data`."""
        return f"{self.prefix}:signals"

    def children_of(self, session_id: str) -> str:
        """List: the sessions `spawn_agent` started for this one, in the order they were
        spawned (each id once); expires with the parent's keys."""
        return f"{self.session(session_id).record}:children"

    # --- forks (README's Fork a session, daemon/schema/turnmarks.py, daemon/bus/session/forks.py) --------

    def turns_of(self, session_id: str) -> str:
        """Hash: what the session kept of each turn's end, for forks: `end:<n>`, `state:<n>`,
        `snap:<n>` (daemon/schema/turnmarks.py); written by turn_ended.lua (its KEYS[9]) and, for
        a fork's copied turns, by the fork's dispatch MULTI; expires twice the retention after
        its last write."""
        return f"{self.session(session_id).record}:turns"

    def forks_of(self, session_id: str) -> str:
        """List: the sessions forked from this one, in the order they were made, each once
        (pushed in the fork's dispatch MULTI); expires twice the retention after the last."""
        return f"{self.session(session_id).record}:forks"

    @property
    def metrics(self) -> str:
        """Hash: the fleet's counters and histogram buckets, one field per metric and label
        set (daemon/bus/fleet/metrics.py documents the field layout); never expires."""
        return f"{self.prefix}:metrics"

    @property
    def metrics_inflight(self) -> str:
        """Hash: process (`host:pid`) -> `<model calls in flight> <expiry ms>`."""
        return f"{self.prefix}:metrics:inflight"

    def metrics_steer_rate(self, bucket: int) -> str:
        """String: steers accepted in one 10-second bucket (epoch seconds // 10), expiring."""
        return f"{self.prefix}:metrics:steers:{int(bucket)}"

    @property
    def fleet_history(self) -> str:
        """Stream: one sample of the fleet a minute (daemon/bus/fleet/history.py), entry id
        `<minute start ms>-0`, trimmed to the last 24 hours at every add."""
        return f"{self.prefix}:fleet:history"

    @property
    def workers(self) -> str:
        """Sorted set: live worker process id -> its last heartbeat (ms since the epoch)."""
        return f"{self.prefix}:workers"

    def worker(self, worker: str) -> str:
        """String with TTL: one worker process's presence (JSON, daemon/bus/fleet/workers.py). The id
        is `host:pid` (a host name never holds `{`, `}` or spaces)."""
        return f"{self.prefix}:worker:{worker}"

    # --- webhooks (README's Webhooks, daemon/bus/outbox/webhooks.py) -----------------------------------

    @property
    def webhooks(self) -> WebhookKeys:
        base = f"{self.prefix}:{{webhooks}}"
        return WebhookKeys(
            deliveries=f"{base}:deliveries",
            due=f"{base}:due",
            log=f"{base}:log",
            failed=f"{base}:failed",
        )

    def webhooks_of(self, session_id: str) -> str:
        """List: one session's webhook delivery ids, in the order they were queued (its
        hash-tag slot); written by emit.lua with the event, expires with the session."""
        return f"{self.session(session_id).record}:webhooks"

    # --- triggers (README's Triggers, daemon/bus/fleet/triggers.py) -----------------------------------

    def trigger(self, trigger_id: str) -> TriggerKeys:
        """The keys of one trigger of the triggers file, in its own hash-tag slot."""
        base = f"{self.prefix}:{{trigger:{require_trigger_id(trigger_id)}}}"
        return TriggerKeys(
            state=base,
            poller=f"{base}:poller",
            seen=f"{base}:seen",
            etags=f"{base}:etags",
            fires=f"{base}:fires",
            queued=f"{base}:queued",
            base=base,
        )


@dataclass(frozen=True, slots=True)
class TriggerKeys:
    """One trigger's keys, all in the `{trigger:<id>}` slot (docs/redis.md, "Triggers")."""

    state: str  # hash: lastFireAt, lastPollAt, cursor, lastError, sessionsStarted, ... (TriggerState)
    poller: str  # string with PX TTL: `host:pid:random` of the one process polling it (the lease)
    seen: str  # sorted set: `<item id>@<updated_at>` -> updated_at (ms): item versions handled
    etags: str  # hash: request URL -> its ETag (If-None-Match on the next poll)
    fires: str  # stream: one entry per fire (field `data`: FireRecord JSON), trimmed MAXLEN ~ 1000
    queued: str  # list: events waiting for their key's session to end (whileRunning: queue), JSON
    base: str

    def binding(self, key_digest: str) -> str:
        """String: the session last started for one `key` (its digest): what `whileRunning`
        looks at, WATCHed by the dispatch that replaces it; expires with the retention."""
        return f"{self.base}:key:{_hex_digest(key_digest)}"

    def delivery(self, delivery_digest: str) -> str:
        """String: what one provider delivery (or polled item version) did (FireRecord JSON),
        so a redelivery answers the same and does nothing; expires with the retention."""
        return f"{self.base}:delivery:{_hex_digest(delivery_digest)}"

    def all(self) -> tuple[str, ...]:
        return (self.state, self.poller, self.seen, self.etags, self.fires, self.queued)


@dataclass(frozen=True, slots=True)
class WebhookKeys:
    """The fleet's webhook deliveries, in one hash-tag slot (`{webhooks}`)."""

    deliveries: str  # hash: delivery id -> its record (JSON, daemon.bus.outbox.webhooks.WebhookDelivery)
    due: str  # sorted set: delivery id -> when its next try is due (ms); pending ones only
    log: str  # sorted set: delivery id -> when it was queued (ms): every kept delivery
    failed: str  # sorted set: delivery id -> when it was given up (ms)

    def all(self) -> tuple[str, ...]:
        return (self.deliveries, self.due, self.log, self.failed)
