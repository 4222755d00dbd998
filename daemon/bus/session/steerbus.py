"""The steer bus (README's HTTP API, docs/redis.md, docs/durability.md): every state change is one Lua script.

`SteerBus` is the coordinator side (accept, cancel, read the journal); `SessionChannel` is
the worker side of one session (claim, turn start/end, idle take, checkpoint, heartbeat,
release, finish), fenced by the attempt number its claim was given (daemon/bus/session/fencing.py): a
worker whose attempt is no longer the session's can no longer change it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import redis

from daemon.bus import scripts
from daemon.bus.keys import Keys, SessionKeys
from daemon.bus.replication import Replication

# The reply types are daemon/bus/replies.py's; those named `X as X` are re-exported for
# the modules that import them from the bus they come from.
from daemon.bus.replies import CancelRequested, ClaimRefusal, FenceRefusal, steers_of
from daemon.bus.replies import Claim as Claim
from daemon.bus.replies import LeaseCheck as LeaseCheck
from daemon.bus.replies import Receipt as Receipt
from daemon.bus.replies import SteerChange as SteerChange
from daemon.bus.replies import SteerOutcome as SteerOutcome
from daemon.bus.replies import Taken as Taken
from daemon.bus.replies import TurnStart as TurnStart
from daemon.bus.scriptpipe import Direct, Riders, ScriptCall
from daemon.bus.scripts import BusScripts, WorkerScript
from daemon.bus.session.checkpointfields import WrittenFields
from daemon.bus.session.fencing import Fence, LeaseUnconfirmed
from daemon.host.clock import utc_now_iso
from daemon.host.redisconn import as_text
from daemon.schema.endcheckpoint import EndCheckpoint
from daemon.schema.events import EventBase
from daemon.schema.records import JournalEntry, PendingSteer, SessionStatus, SteerMode, SteerRef
from daemon.schema.turnmarks import TurnMark
from daemon.turn.interrupt import TurnInterrupt

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AcceptResult:
    outcome: SteerOutcome
    ref: SteerRef | None = None
    current_turn_id: int | None = None  # set for STALE_TURN
    accepted_at: str | None = None  # set for ACCEPTED: the `ts` accept.lua gave steer_accepted


@dataclass(frozen=True, slots=True)
class ChangeResult:
    change: SteerChange
    previous_text: str | None = None  # the text the steer had before (retracted/edited)
    at: str | None = None  # the timestamp the script journalled


class Cancelled(Exception):
    """The coordinator cancelled the session; raised at the turn boundary that noticed."""


def text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


# How far back a resuming attempt looks for its predecessor's last receipt: the events of
# one turn (a turn emits a few per tool call), with room to spare.
RECEIPT_SCAN = 500
# A guard past the trust window asks Redis at most this often before it gives up.
GUARD_HEARTBEATS = 3


class SteerBus:
    """Coordinator-facing operations on the bus."""

    def __init__(self, client: redis.Redis, keys: Keys, retention_seconds: int = 7 * 86400) -> None:
        self.client = client
        self.keys = keys
        self.scripts = BusScripts(client)
        self.retention_seconds = retention_seconds
        # WORKTRAIN_REDIS_WAIT_REPLICAS on the worker side: a request leaves only once the
        # replicas hold its receipt (see request_sent); None or 0 replicas: no wait
        self.replication: Replication | None = None

    def accept(
        self,
        session_id: str,
        text: str,
        expected_turn_id: int | None = None,
        client_msg_id: str | None = None,
        mode: SteerMode = "queue",
        max_pending: int = 0,
        traceparent: str | None = None,
    ) -> AcceptResult:
        """Rules 1-5 of README's HTTP API in one round trip. `session_id` must already be valid;
        `max_pending` > 0 refuses a steer while that many wait (WORKTRAIN_MAX_PENDING_STEERS).
        An interrupt steer that finds a live turn also flags and announces it (README's Managing steers)."""
        now = utc_now_iso()
        args = self._accept_args(text, now, expected_turn_id, client_msg_id, mode, max_pending, traceparent)
        reply = self.scripts.run(scripts.ACCEPT, self.keys.session(session_id), args)
        outcome = reply.outcome
        if reply.turn is not None and reply.offset is not None:  # accepted, or a duplicate
            ref = SteerRef(turnId=reply.turn, offset=reply.offset, clientMsgId=client_msg_id)
            accepted_at = now if outcome is SteerOutcome.ACCEPTED else None
            return AcceptResult(outcome, ref=ref, accepted_at=accepted_at)
        return AcceptResult(outcome, current_turn_id=reply.live_turn)

    def _accept_args(
        self,
        text: str,
        now: str,
        expected_turn_id: int | None = None,
        client_msg_id: str | None = None,
        mode: SteerMode = "queue",
        max_pending: int = 0,
        traceparent: str | None = None,
    ) -> list[Any]:
        return [
            text,
            text_digest(text),
            "" if expected_turn_id is None else expected_turn_id,
            client_msg_id or "",
            now,
            max_pending,
            "interrupt" if mode == "interrupt" else "",
            self.keys.interrupts,
            traceparent or "",
        ]

    def accept_in(self, pipe: redis.client.Pipeline, session_id: str, text: str, now: str) -> None:
        """Queue the accept of `text` in a caller's transaction, after the record it needs (a
        fork's steer, accepted with the fork: offset 1, delivered to its first turn)."""
        self.scripts.queue(pipe, scripts.ACCEPT, self.keys.session(session_id), self._accept_args(text, now))

    def retract(self, session_id: str, offset: int) -> ChangeResult:
        """Withdraw a pending steer, atomically with the drain (retract.lua)."""
        now = utc_now_iso()
        reply = self.scripts.run(scripts.RETRACT, self.keys.session(session_id), [offset, now])
        return ChangeResult(reply.change, reply.previous_text, now)

    def edit(self, session_id: str, offset: int, text: str, max_edits: int = 20) -> ChangeResult:
        """Rewrite a pending steer's text in place, atomically with the drain (edit.lua), at
        most `max_edits` times. `text` must already be trimmed and within the size cap."""
        now = utc_now_iso()
        reply = self.scripts.run(scripts.EDIT, self.keys.session(session_id), [offset, text, now, max_edits])
        return ChangeResult(reply.change, reply.previous_text, now)

    def cancel(self, session_id: str) -> tuple[str, list[int]]:
        """Returns (`not_found`|`finished`|`requested`|`cancelled`, undelivered offsets)."""
        args = [utc_now_iso(), self.retention_seconds, self.keys.interrupts]  # a cancel is announced
        reply = self.scripts.run(scripts.CANCEL, self.keys.session(session_id), args)
        return reply.outcome, reply.undelivered

    def journal(self, session_id: str) -> list[JournalEntry] | None:
        """The session's steer journal, oldest first; None when the session is unknown
        (or expired)."""
        keys = self.keys.session(session_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.exists(keys.record)
        pipe.xrange(keys.journal)
        exists, entries = pipe.execute()
        if not exists:
            return None
        return [JournalEntry.from_stream(eid, fields) for eid, fields in entries]

    def pending(self, session_id: str) -> list[PendingSteer]:
        """Steers accepted but not yet delivered: in flight first, then pending (offset order)."""
        keys = self.keys.session(session_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(keys.inflight, 0, -1)
        pipe.lrange(keys.pending, 0, -1)
        inflight, pending = pipe.execute()
        return steers_of([*inflight, *pending])

    def channel(
        self, session_id: str, worker_id: str, lease_seconds: float, attempt: int | None = None
    ) -> SessionChannel:
        """The worker side of one session. `attempt` is set by `claim()`; pass it only to act
        for an attempt claimed elsewhere (tests, a heartbeat loop serving many sessions)."""
        return SessionChannel(self, session_id, worker_id, int(lease_seconds * 1000), attempt)


class ClaimRefused(Exception):
    """The session is finished, or another worker holds it: this job leaves it alone."""

    def __init__(self, reason: str, holder: str | None = None) -> None:
        super().__init__(reason if holder is None else f"{reason} by {holder}")
        self.reason = reason
        self.holder = holder


class SessionChannel:
    """One attempt's fenced view of one session on the bus.

    Every worker-side call is one script (daemon/bus/scripts.WORKER_SCRIPTS) that takes the
    worker id and the attempt number and is refused — `Fenced`, nothing written — once the
    attempt is not the session's current one. After one refusal every later call raises at
    once without touching Redis. `guard()` is the check before a model or tool call.
    """

    def __init__(
        self,
        bus: SteerBus,
        session_id: str,
        worker_id: str,
        lease_ms: int,
        attempt: int | None = None,
        client: redis.Redis | None = None,
    ) -> None:
        self.bus = bus
        self.session_id = session_id
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.keys: SessionKeys = bus.keys.session(session_id)
        self.client = client if client is not None else bus.client
        self.fence: Fence | None = None if attempt is None else Fence(session_id, attempt, lease_ms / 1000)
        # Whether the live turn was asked to stop (daemon/turn/interrupt.py): begun when a turn is
        # bound, ended at its drain, requested by the heartbeat and the process's listener.
        self.interrupt = TurnInterrupt(session_id)
        self.written = WrittenFields()  # the record fields this attempt's checkpoints wrote
        self.riders: Riders = Direct(bus.scripts)  # its queued events ride with its next script

    def using(self, client: redis.Redis) -> SessionChannel:
        """The same attempt (fence, interrupt) on another connection: the heartbeat thread's."""
        other = SessionChannel(self.bus, self.session_id, self.worker_id, self.lease_ms, client=client)
        other.adopt_attempt(self)
        return other

    def adopt_attempt(self, channel: SessionChannel) -> None:
        """Act for `channel`'s attempt: one fence, interrupt, fields written, event queue."""
        self.fence = channel.fence
        self.interrupt = channel.interrupt
        self.written = channel.written
        self.riders = channel.riders

    @property
    def attempt(self) -> int:
        return self._fence().attempt

    def _fence(self) -> Fence:
        if self.fence is None:
            raise RuntimeError(f"session {self.session_id}: no attempt claimed on this channel")
        return self.fence

    def fenced_args(self, *args: Any) -> list[Any]:
        """The ARGV of a worker-side script: (worker, attempt, lease_ms, *args)."""
        return [self.worker_id, self.attempt, self.lease_ms, *args]

    def answer(self, reply: T | FenceRefusal, sent_at: float) -> T:
        """Read a worker-side script's decoded reply to a call sent at `sent_at` (`fence.now()`):
        raises Fenced on a refusal, else records the lease as renewed. A caller that
        pipelines the scripts of many sessions feeds each reply here."""
        fence = self._fence()
        if isinstance(reply, FenceRefusal):
            raise fence.refuse(reply.reason)
        fence.renewed(sent_at)
        return reply

    def _fenced(self, script: WorkerScript[T], *args: Any, extra_keys: tuple[str, ...] = ()) -> T:
        """Run a worker-side script for this attempt. With WAIT configured, its change is
        confirmed on the replicas before the attempt goes on (daemon/bus/replication.py), the
        script run again on the primary the sentinels name until it is: so what the attempt
        holds in memory is what a failover leaves it, and an attempt whose lease the new
        primary still holds keeps its session. A heartbeat is not waited for: a renewal a
        failover loses only shortens the lease."""
        replication = self.bus.replication
        if script is scripts.HEARTBEAT or replication is None or not replication.enabled:
            return self.answer(*self._run_fenced(script, args, extra_keys))
        reply, sent_at = replication.confirmed(
            lambda: self._run_fenced(script, args, extra_keys), self._may_retry, f"{script.name}.lua"
        )
        return self.answer(reply, sent_at)

    def _run_fenced(
        self, script: WorkerScript[T], args: tuple[Any, ...], extra_keys: tuple[str, ...]
    ) -> tuple[T, float]:
        """One run: its reply and when it was sent. A refusal raises at once (it wrote nothing).
        The attempt's queued events go first, in the same round trip (`riders`)."""
        fence = self._fence()
        fence.check()
        sent_at = fence.now()
        call = ScriptCall(script, [*self.keys.all(), *extra_keys], self.fenced_args(*args))
        reply: T | FenceRefusal = self.riders.carry(call, self.client, sent_at)
        if isinstance(reply, FenceRefusal):
            raise fence.refuse(reply.reason)
        return reply, sent_at

    def _may_retry(self) -> None:
        """Whether a step not yet confirmed may run again: not once refused, nor past the
        local lease deadline (the heartbeat renews the lease on the new primary meanwhile)."""
        fence = self._fence()
        fence.check()
        if fence.expired:
            raise LeaseUnconfirmed(self.session_id, fence.attempt, "no replica confirmed its write in time")

    def call(self, script: WorkerScript[T], *args: Any, extra_keys: tuple[str, ...] = ()) -> T:
        """Run the worker-side `script` (in WORKER_SCRIPTS) for this attempt: its decoded
        reply, or `Fenced` (daemon/bus/session/attemptevents.py appends events with it; `extra_keys`:
        its webhook keys)."""
        return self._fenced(script, *args, extra_keys=extra_keys)

    def guard(self) -> None:
        """Immediately before a side effect (a model request's send, a tool's spawn or
        write, an event append): raise Fenced if Redis refused this attempt. Free while the
        heartbeat keeps the lease fresh; past the fence's trust window (a freeze, a
        partition) it asks Redis first, with a heartbeat. Past the local lease deadline
        nothing starts without that confirmation: `LeaseUnconfirmed` when Redis cannot
        give it (docs/durability.md)."""
        fence = self._fence()
        fence.check()
        if fence.ended:
            return
        for _ in range(GUARD_HEARTBEATS):
            if fence.trusted:
                return
            try:
                self.heartbeat()  # raises Fenced on a refusal
            except redis.RedisError as exc:
                if not fence.expired:
                    return  # still inside the deadline: the beats keep trying
                raise LeaseUnconfirmed(
                    self.session_id, fence.attempt, f"{type(exc).__name__}: {exc}"
                ) from exc
        if fence.expired:  # each confirmation came back too late to count (a slow Redis)
            raise LeaseUnconfirmed(self.session_id, fence.attempt, "no heartbeat confirmed it in time")

    def halted(self) -> str | None:
        """Why what runs for this attempt must stop now, without a round trip (Fence.halted)."""
        return self._fence().halted()

    def lease_left(self) -> float | None:
        """Seconds until the attempt's local lease deadline, or None once it ended the session
        (a spawned command starts only inside them: daemon/sandbox/launch.py `NOT_AFTER_ENV`)."""
        fence = self._fence()
        return None if fence.ended else fence.left()

    def claim(self) -> Claim:
        claim = self.bus.scripts.run(
            scripts.CLAIM, self.keys, [self.worker_id, self.lease_ms, utc_now_iso()], client=self.client
        )
        if isinstance(claim, ClaimRefusal):
            raise ClaimRefused(claim.reason, claim.holder)
        self.fence = Fence(self.session_id, claim.attempt, self.lease_ms / 1000)
        return claim

    def start_turn(
        self, expected: int | None = None, drain: bool = False, announce: EventBase | None = None
    ) -> TurnStart:
        """Bind the live turn; raises Cancelled if a cancel was requested, Fenced if refused.

        `expected` is the turn id the caller is about to start (its last turn + 1): when the
        script runs twice (its reply lost to a dropped connection and the call retried), the
        second run finds that turn already live and binds it again instead of skipping one.
        `drain` (an attempt's first turn) also takes every steer not yet delivered, in flight
        then pending, in the same atomic step. `announce`: its `turn_started`, appended in the
        same step when that turn is bound (`Riders.announcement`: the riders skip it then).
        """
        line = self.riders.announcement(announce) if expected is not None else ""
        turn = "" if expected is None else expected
        started = self._fenced(scripts.TURN_STARTED, "1" if drain else "0", turn, utc_now_iso(), line)
        if isinstance(started, CancelRequested):
            raise Cancelled(self.session_id)
        if line and started.turn == expected:
            self.riders.appended(announce, line)
        self.interrupt.begin(started.turn)
        return started

    def request_sent(
        self, turn: int, announce: EventBase | None = None, expected: Sequence[int] = ()
    ) -> list[int]:
        """The live turn's request is about to leave: the steers checkpointed into it are
        journalled delivered to `turn` (request_sent.lua); returns its receipt's offsets.
        With WAIT configured, only once the replicas hold that (as every worker-side change):
        a failover then cannot bring back as pending a steer the model already received.
        `announce`: its `steer_delivered`, appended if the receipt is `expected` (`start_turn`)."""
        line = self.riders.announcement(announce)
        want = orjson.dumps(list(expected)) if line else ""
        offsets = self._fenced(scripts.REQUEST_SENT, turn, utc_now_iso(), want, line)
        if line and offsets == list(expected):
            self.riders.appended(announce, line)
        return offsets

    def turn_ended(
        self,
        status: SessionStatus = SessionStatus.RUNNING,
        mark: TurnMark | None = None,
        end: EndCheckpoint | None = None,
    ) -> list[PendingSteer]:
        """Clear the live turn and drain: returns every steer now in flight, in offset order
        (an interrupt steer among them: the turn's interrupt ends here). `mark`: what a fork
        from this turn needs (daemon/schema/turnmarks.py), and `end`, the turn's end checkpoint
        as its steers allow (daemon/schema/endcheckpoint.py), written in the same step."""
        args: list[Any] = [status.value]
        extra: tuple[str, ...] = ()
        if mark is not None:
            extra = (self.bus.keys.turns_of(self.session_id),)
            args += mark.args(2 * self.bus.retention_seconds)
        changed = self.written.changed(end.fields) if end is not None else {}
        if end is not None:
            args += [""] * (7 - len(args)) + end.args(changed)
        steers = self._fenced(scripts.TURN_ENDED, *args, extra_keys=extra)
        self.written.wrote(changed)
        self.interrupt.end()
        return steers

    def take(self) -> Taken:
        """The idle wait's non-blocking take: every steer in flight (pending ones moved there
        first), the cancel flag, and the journal cursor to block after. Safe to repeat."""
        return self._fenced(scripts.TAKE)

    def wait_for_steers(self, cursor: str, timeout_seconds: float) -> bool:
        """Block until the journal has an entry after `cursor` (a steer was accepted), or the
        timeout passes. Read-only (XREAD), so a retry after a lost reply is harmless; the
        steers themselves are taken by `take()`. The client's socket timeout must be longer
        than the block."""
        block_ms = max(int(timeout_seconds * 1000), 1)  # 0 would block forever
        return bool(self.client.xread({self.keys.journal: cursor}, count=1, block=block_ms))

    def checkpoint(
        self,
        keep: int,
        messages: Sequence[str],
        delivered: Sequence[int],
        receiving_turn: int,
        fields: dict[str, str | int] | None = None,
    ) -> None:
        """Store the history from `keep` on, retire the `delivered` steers, and set those of
        `fields` this attempt has not written already (checkpoint.lua)."""
        changed = self.written.changed(fields or {})
        self._fenced(
            scripts.CHECKPOINT,
            keep,
            orjson.dumps(list(delivered)),
            receiving_turn,
            utc_now_iso(),
            orjson.dumps(changed) if changed else "",
            *messages,
        )
        self.written.wrote(changed)

    def receipt_emitted(self, receipt: Receipt, scan: int = RECEIPT_SCAN) -> bool:
        """Whether the session's event stream already holds this receipt: the attempt that
        journalled it may have emitted it and died before turn_ended.lua confirmed it."""
        entries: Any = self.client.xrevrange(self.keys.events, count=scan)
        for _, fields in entries:
            raw = fields.get("data") or fields.get(b"data")
            event = json.loads(raw) if raw is not None else {}
            if event.get("kind") == "steer_delivered" and event.get("turnId") == receipt.turn:
                return bool(event.get("offsets") == receipt.offsets)
        return False

    def history(self) -> list[str]:
        return [as_text(item) for item in self.client.lrange(self.keys.history, 0, -1)]

    def heartbeat(self) -> LeaseCheck:
        """Renew the lease; also reads the cancel flag and how many steers wait (pending or in
        flight). Raises Fenced when this attempt is no longer the session's."""
        fence = self._fence()
        fence.check()
        sent_at = fence.now()
        reply = self.bus.scripts.run(scripts.HEARTBEAT, self.keys, self.fenced_args(), client=self.client)
        return self.heartbeat_answer(reply, sent_at)

    def heartbeat_answer(self, reply: LeaseCheck | FenceRefusal, sent_at: float) -> LeaseCheck:
        """Read a heartbeat's decoded reply (this one's, or one pipelined with other sessions'
        by daemon/bus/session/leasebeats.py): raises Fenced on a refusal, else renews the fence and
        passes an interrupt the record flags for the live turn to the loop."""
        check = self.answer(reply, sent_at)
        if check.interrupt_turn:
            self.interrupt.request(check.interrupt_turn)
        if check.cancel_requested:
            self.interrupt.cancel()  # a running tool stops now, not at the turn's end (docs/durability.md)
        return check

    def mark_waiting(self, reason: str | None, status: SessionStatus | None = None) -> None:
        """`waitingFor` in the record: what the live turn waits for (None clears it); with
        `status` (waiting / running) the record's status as well."""
        self._fenced(scripts.MARK_WAITING, reason or "", status.value if status else "")

    def release(self) -> int:
        """Hand the session over (the worker is stopping); returns the job number to enqueue
        (daemon.bus.jobspec.job_id)."""
        return self._fenced(scripts.RELEASE)

    def set_fields(self, fields: dict[str, str | int]) -> None:
        """Set record fields outside a checkpoint (a worktree session's delivery), fenced."""
        self._fenced(scripts.SET_FIELDS, json.dumps(fields))

    def finish(self, status: SessionStatus, outcome: str, detail: str = "") -> list[int]:
        """End the session; returns the offsets recorded as undelivered."""
        undelivered = self._fenced(
            scripts.FINISH, status.value, outcome, detail, utc_now_iso(), self.bus.retention_seconds
        )
        self._fence().ended = True
        return undelivered
