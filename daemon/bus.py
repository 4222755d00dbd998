"""The steer bus (SPEC §3.1, §3.2, §5.2, §6): every state change is one Lua script.

`SteerBus` is the coordinator side (accept, cancel, read the journal); `SessionChannel` is
the worker side of one session (claim, turn start/end, checkpoint, finish), fenced by the
worker's lease so that a worker that lost its session can no longer change it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis

from daemon.clock import utc_now_iso
from daemon.keys import Keys, SessionKeys
from daemon.records import JournalEntry, PendingSteer, SessionStatus, SteerRef
from daemon.redisconn import as_text
from daemon.scripts import BusScripts


class SteerOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    NOT_FOUND = "not_found"
    CLIENT_MSG_ID_REUSE = "client_msg_id_reuse"
    NO_LIVE_TURN = "no_live_turn"
    STALE_TURN = "stale_turn"
    TOO_MANY_PENDING_STEERS = "too_many_pending_steers"


@dataclass(frozen=True, slots=True)
class AcceptResult:
    outcome: SteerOutcome
    ref: SteerRef | None = None
    current_turn_id: int | None = None  # set for STALE_TURN
    accepted_at: str | None = None  # set for ACCEPTED: the `ts` accept.lua gave steer_accepted


class LeaseLost(Exception):
    """Another worker holds this session now; this worker must stop touching it."""


class Cancelled(Exception):
    """The coordinator cancelled the session; raised at the turn boundary that noticed."""


def text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _steers(raw: Sequence[Any]) -> list[PendingSteer]:
    return [PendingSteer.model_validate_json(item) for item in raw]


class SteerBus:
    """Coordinator-facing operations on the bus."""

    def __init__(self, client: redis.Redis, keys: Keys, retention_seconds: int = 7 * 86400) -> None:
        self.client = client
        self.keys = keys
        self.scripts = BusScripts(client)
        self.retention_seconds = retention_seconds

    def accept(
        self,
        session_id: str,
        text: str,
        expected_turn_id: int | None = None,
        client_msg_id: str | None = None,
        max_pending: int = 0,
    ) -> AcceptResult:
        """Rules 1-5 of SPEC §3.1 in one round trip. `session_id` must already be valid;
        `max_pending` > 0 refuses a steer while that many wait (WORKTRAIN_MAX_PENDING_STEERS)."""
        now = utc_now_iso()
        reply = self.scripts.run(
            "accept",
            self.keys.session(session_id),
            [
                text,
                text_digest(text),
                "" if expected_turn_id is None else expected_turn_id,
                client_msg_id or "",
                now,
                max_pending,
            ],
        )
        outcome = SteerOutcome(as_text(reply[0]))
        if outcome in (SteerOutcome.ACCEPTED, SteerOutcome.DUPLICATE):
            ref = SteerRef(turnId=int(reply[1]), offset=int(reply[2]), clientMsgId=client_msg_id)
            accepted_at = now if outcome is SteerOutcome.ACCEPTED else None
            return AcceptResult(outcome, ref=ref, accepted_at=accepted_at)
        if outcome is SteerOutcome.STALE_TURN:
            return AcceptResult(outcome, current_turn_id=int(reply[1]))
        return AcceptResult(outcome)

    def cancel(self, session_id: str) -> tuple[str, list[int]]:
        """Returns (`not_found`|`finished`|`requested`|`cancelled`, undelivered offsets)."""
        reply = self.scripts.run(
            "cancel", self.keys.session(session_id), [utc_now_iso(), self.retention_seconds]
        )
        return as_text(reply[0]), [int(x) for x in reply[1:]]

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
        return _steers([*inflight, *pending])

    def channel(self, session_id: str, worker_id: str, lease_seconds: float) -> SessionChannel:
        return SessionChannel(self, session_id, worker_id, int(lease_seconds * 1000))


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker learns when it takes a session."""

    attempt: int
    history_length: int  # 0: a fresh start; otherwise resume from this checkpoint
    cancel_requested: bool
    handed_over: bool = False  # the previous attempt released it cleanly (graceful stop)
    inflight: list[PendingSteer] = field(default_factory=list)

    @property
    def resumed(self) -> bool:
        return self.attempt > 1


@dataclass(frozen=True, slots=True)
class TurnStart:
    """A turn just bound as the live turn."""

    turn: int
    steers: list[PendingSteer]  # with drain: every steer not yet delivered, in offset order
    receipted: list[int]  # offsets an earlier checkpoint delivered into this turn's request


@dataclass(frozen=True, slots=True)
class LeaseCheck:
    """What one heartbeat learns."""

    owned: bool  # False: another worker holds the session now (this one is fenced)
    cancel_requested: bool


class ClaimRefused(Exception):
    """The session is finished, or another worker holds it: this job leaves it alone."""

    def __init__(self, reason: str, holder: str | None = None) -> None:
        super().__init__(reason if holder is None else f"{reason} by {holder}")
        self.reason = reason
        self.holder = holder


class SessionChannel:
    """One worker's fenced view of one session on the bus."""

    def __init__(self, bus: SteerBus, session_id: str, worker_id: str, lease_ms: int) -> None:
        self.bus = bus
        self.session_id = session_id
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.keys: SessionKeys = bus.keys.session(session_id)

    def _run(self, name: str, *args: Any) -> Any:
        return self.bus.scripts.run(name, self.keys, list(args))

    def _fenced(self, name: str, *args: Any) -> list[Any]:
        reply: list[Any] = self._run(name, self.worker_id, self.lease_ms, *args)
        if as_text(reply[0]) == "lease_lost":
            raise LeaseLost(self.session_id)
        return reply

    def claim(self) -> Claim:
        reply = self._run("claim", self.worker_id, self.lease_ms, utc_now_iso())
        status = as_text(reply[0])
        if status != "ok":
            raise ClaimRefused(status, as_text(reply[1]) if len(reply) > 1 else None)
        return Claim(
            attempt=int(reply[1]),
            history_length=int(reply[2]),
            cancel_requested=as_text(reply[3]) == "1",
            handed_over=as_text(reply[4]) == "1",
            inflight=_steers(reply[5:]),
        )

    def start_turn(self, expected: int | None = None, drain: bool = False) -> TurnStart:
        """Bind the live turn; raises Cancelled if a cancel was requested, LeaseLost if fenced.

        `expected` is the turn id the caller is about to start (its last turn + 1): when the
        script runs twice (its reply lost to a dropped connection and the call retried), the
        second run finds that turn already live and binds it again instead of skipping one.
        `drain` (an attempt's first turn) also takes every steer not yet delivered, in flight
        then pending, in the same atomic step.
        """
        reply = self._fenced("turn_started", "1" if drain else "0", "" if expected is None else expected)
        if as_text(reply[0]) == "cancelled":
            raise Cancelled(self.session_id)
        return TurnStart(int(reply[1]), _steers(reply[3:]), json.loads(reply[2]))

    def turn_started(self, expected: int | None = None) -> int:
        return self.start_turn(expected).turn

    def turn_ended(self, status: SessionStatus = SessionStatus.RUNNING) -> list[PendingSteer]:
        """Clear the live turn and drain: returns every steer now in flight, in offset order."""
        return _steers(self._fenced("turn_ended", status.value)[1:])

    def wait_for_steer(self, timeout_seconds: float) -> bool:
        """Block until a steer is pending (moved in flight atomically), or the timeout passes.

        Fractional seconds are fine (Redis >= 6 takes a decimal timeout). The client's socket
        timeout must be longer than the block.
        """
        timeout: Any = timeout_seconds  # redis-py annotates int; Redis takes a decimal
        moved = self.bus.client.blmove(self.keys.pending, self.keys.inflight, timeout, "LEFT", "RIGHT")
        return moved is not None

    def checkpoint(
        self,
        keep: int,
        messages: Sequence[str],
        delivered: Sequence[int],
        receiving_turn: int,
        fields: dict[str, str | int] | None = None,
    ) -> None:
        self._fenced(
            "checkpoint",
            keep,
            json.dumps(list(delivered)),
            receiving_turn,
            utc_now_iso(),
            json.dumps(fields or {}),
            *messages,
        )

    def history(self) -> list[str]:
        return [as_text(item) for item in self.bus.client.lrange(self.keys.history, 0, -1)]

    def heartbeat(self) -> LeaseCheck:
        """Renew the lease (or learn another worker holds it) and read the cancel flag."""
        owned, cancel = self._run("heartbeat", self.worker_id, self.lease_ms)
        return LeaseCheck(owned=int(owned) == 1, cancel_requested=as_text(cancel) == "1")

    def release(self) -> bool:
        return int(self._run("release", self.worker_id, self.lease_ms)) == 1

    def finish(self, status: SessionStatus, outcome: str, detail: str = "") -> list[int]:
        """End the session; returns the offsets recorded as undelivered."""
        reply = self._fenced(
            "finish", status.value, outcome, detail, utc_now_iso(), self.bus.retention_seconds
        )
        return [int(x) for x in reply[1:]]
