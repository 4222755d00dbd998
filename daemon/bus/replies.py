"""Every Lua script's reply, and the shapes of redis-py's replies the bus reads, decoded once.

A Lua script answers a flat array (Redis has no other reply shape for a script): a word,
then its fields in a fixed order, then, for some, a list. Each decoder below names those
positions once and quotes its script's `Returns` line (daemon/bus/lua/<script>.lua), and
daemon/bus/scripts.py registers each script with its decoder, so a caller gets a typed
value (`Claim.attempt`) and never the array (`reply[6:]`). tests/test_replies.py holds that:
no reply read by position anywhere else in the bus, and every `Returns` line quoted here.

A worker-side script's refusal (`{'fenced', reason}`, _common.lua's `fence()`) is decoded by
`fenced()`, around the script's own decoder: `SessionChannel.answer` raises `Fenced` on it.
A reply no decoder knows raises `UnexpectedReply`: never read as something it is not.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeVar, cast

from daemon.host.redisconn import as_text
from daemon.schema.records import PendingSteer

T = TypeVar("T")


class UnexpectedReply(ValueError):
    """A script answered a shape its decoder does not know (a script and a decoder out of step)."""


def _word(reply: Sequence[Any], *known: str) -> str:
    """The word a reply starts with, one of `known`."""
    word = as_text(reply[0]) if reply else ""
    if word not in known:
        raise UnexpectedReply(f"expected one of {known}, got {reply!r}")
    return word


def steers_of(raw: Sequence[Any]) -> list[PendingSteer]:
    """The in-flight (or pending) steers a reply ends with, as JSON texts, offset order."""
    return [PendingSteer.model_validate_json(item) for item in raw]


def _offsets(raw: Sequence[Any]) -> list[int]:
    return [int(x) for x in raw]


# --- the fence ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FenceRefusal:
    """A worker-side script refused the attempt and wrote nothing: `{'fenced', reason}`
    (reason `finished`, `stale_attempt` or `lease_lost`)."""

    reason: str


def fenced(decode: Callable[[Any], T]) -> Callable[[Any], T | FenceRefusal]:
    """The decoder of a worker-side script: its refusal, else what `decode` reads."""

    @functools.wraps(decode)
    def read(reply: Any) -> T | FenceRefusal:
        if reply and as_text(reply[0]) == "fenced":
            _, reason = reply
            return FenceRefusal(as_text(reason))
        return decode(reply)

    return read


def ok(reply: Any) -> None:
    """checkpoint.lua, emit.lua, mark_waiting.lua, set_fields.lua: `{'ok'}` (or the fence's)."""
    _word(reply, "ok")


# --- the coordinator side: steers, cancel, claim, reap -------------------------------------


class SteerOutcome(StrEnum):
    """What accept.lua answered (README's HTTP API)."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    NOT_FOUND = "not_found"
    CLIENT_MSG_ID_REUSE = "client_msg_id_reuse"
    NO_LIVE_TURN = "no_live_turn"
    STALE_TURN = "stale_turn"
    TOO_MANY_PENDING_STEERS = "too_many_pending_steers"


@dataclass(frozen=True, slots=True)
class Accepted:
    """accept.lua: `{'accepted', turnId, offset}` `{'duplicate', turnId, offset}` `{'not_found'}`
    `{'client_msg_id_reuse'}` `{'no_live_turn'}` `{'stale_turn', liveTurnId}`
    `{'too_many_pending_steers', maxPending}`."""

    outcome: SteerOutcome
    turn: int | None = None  # accepted / duplicate: the turn the steer was accepted for
    offset: int | None = None  # accepted / duplicate: the steer's offset
    live_turn: int | None = None  # stale_turn: the turn live now
    max_pending: int | None = None  # too_many_pending_steers: the cap it met

    @staticmethod
    def decode(reply: Sequence[Any]) -> Accepted:
        try:
            outcome = SteerOutcome(as_text(reply[0]))
        except ValueError:
            raise UnexpectedReply(f"accept.lua: {reply!r}") from None
        if outcome in (SteerOutcome.ACCEPTED, SteerOutcome.DUPLICATE):
            _, turn, offset = reply
            return Accepted(outcome, turn=int(turn), offset=int(offset))
        if outcome is SteerOutcome.STALE_TURN:
            _, live = reply
            return Accepted(outcome, live_turn=int(live))
        if outcome is SteerOutcome.TOO_MANY_PENDING_STEERS:
            _, cap = reply
            return Accepted(outcome, max_pending=int(cap))
        return Accepted(outcome)


class SteerChange(StrEnum):
    """What retract.lua / edit.lua answered (README's Managing steers)."""

    RETRACTED = "retracted"
    EDITED = "edited"
    TOO_MANY_EDITS = "too_many_edits"  # WORKTRAIN_MAX_STEER_EDITS reached: nothing changed
    NOT_PENDING = "not_pending"  # a drain took it (or it was retracted): the journal says which
    STEER_NOT_FOUND = "steer_not_found"
    NOT_FOUND = "not_found"  # no such session (or its keys expired)


@dataclass(frozen=True, slots=True)
class Changed:
    """retract.lua: `{'retracted', text}` `{'not_pending'}` `{'steer_not_found'}` `{'not_found'}`;
    edit.lua: `{'edited', previousText}` `{'too_many_edits'}` `{'not_pending'}`
    `{'steer_not_found'}` `{'not_found'}`."""

    change: SteerChange
    previous_text: str | None = None  # retracted / edited: the text the steer had before

    @staticmethod
    def decode(reply: Sequence[Any]) -> Changed:
        try:
            change = SteerChange(as_text(reply[0]))
        except ValueError:
            raise UnexpectedReply(f"retract.lua / edit.lua: {reply!r}") from None
        if change in (SteerChange.RETRACTED, SteerChange.EDITED):
            _, text = reply
            return Changed(change, as_text(text))
        return Changed(change)


CancelOutcome = Literal["not_found", "finished", "requested", "cancelled"]


@dataclass(frozen=True, slots=True)
class CancelAnswer:
    """cancel.lua: `{'not_found'} | {'finished'} | {'requested'} | {'cancelled', undelivered offsets...}`."""

    outcome: CancelOutcome
    undelivered: list[int] = field(default_factory=list)  # cancelled: the steers it journalled undelivered

    @staticmethod
    def decode(reply: Sequence[Any]) -> CancelAnswer:
        word = _word(reply, "not_found", "finished", "requested", "cancelled")
        _, *offsets = reply
        return CancelAnswer(cast(CancelOutcome, word), _offsets(offsets))


@dataclass(frozen=True, slots=True)
class Reaped:
    """reap.lua: `{'requeued', job number} | {'watching'} | {'changed'}`."""

    outcome: Literal["requeued", "watching", "changed"]
    job: int = 0  # requeued: the number of the job to enqueue

    @staticmethod
    def decode(reply: Sequence[Any]) -> Reaped:
        word = _word(reply, "requeued", "watching", "changed")
        if word == "requeued":
            _, number = reply
            return Reaped("requeued", int(as_text(number)))
        return Reaped(cast(Literal["watching", "changed"], word))


@dataclass(frozen=True, slots=True)
class Receipt:
    """A `steer_delivered` journalled but not yet confirmed emitted (it survives its worker)."""

    turn: int
    offsets: list[int]

    @staticmethod
    def decode(raw: Any) -> Receipt | None:
        text = as_text(raw)
        if not text:
            return None
        data = json.loads(text)
        return Receipt(int(data["turnId"]), [int(x) for x in data["offsets"]])


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker learns when it takes a session (claim.lua:
    `{'ok', attempt, historyLength, cancelRequested, handedOver, receipt, inflight JSON...}`)."""

    attempt: int  # the fencing token of this attempt
    history_length: int  # 0: a fresh start; otherwise resume from this checkpoint
    cancel_requested: bool
    handed_over: bool = False  # the previous attempt released it cleanly (graceful stop)
    inflight: list[PendingSteer] = field(default_factory=list)
    receipt: Receipt | None = None  # the previous attempt's, to emit now

    @property
    def resumed(self) -> bool:
        return self.attempt > 1

    @staticmethod
    def decode(reply: Sequence[Any]) -> Claim:
        _, attempt, history, cancel, handed_over, receipt, *inflight = reply
        return Claim(
            attempt=int(attempt),
            history_length=int(history),
            cancel_requested=as_text(cancel) == "1",
            handed_over=as_text(handed_over) == "1",
            receipt=Receipt.decode(receipt),
            inflight=steers_of(inflight),
        )


@dataclass(frozen=True, slots=True)
class ClaimRefusal:
    """The session is finished, or another worker holds it: this job leaves it alone."""

    reason: Literal["finished", "leased"]
    holder: str | None = None  # leased: the worker holding it


def claimed(reply: Sequence[Any]) -> Claim | ClaimRefusal:
    """claim.lua: `{'finished'} | {'leased', holder} |
    {'ok', attempt, historyLength, cancelRequested, handedOver, receipt, inflight JSON...}`
    (the last read by `Claim.decode`)."""
    word = _word(reply, "ok", "finished", "leased")
    if word == "ok":
        return Claim.decode(reply)
    if word == "leased":
        _, holder = reply
        return ClaimRefusal("leased", as_text(holder))
    return ClaimRefusal("finished")


# --- the worker side (each behind `fenced`) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnStart:
    """A turn just bound as the live turn (turn_started.lua:
    `{'ok', turnId, receipt offsets JSON array, unsent offsets JSON array, steers...}`)."""

    turn: int
    steers: list[PendingSteer]  # with drain: every steer not yet delivered, in offset order
    receipted: list[int]  # offsets journalled delivered into this turn's request so far
    unsent: list[int] = field(default_factory=list)  # checkpointed, journalled when the request leaves

    @staticmethod
    def decode(reply: Sequence[Any]) -> TurnStart:
        _, turn, receipted, unsent, *steers = reply
        return TurnStart(int(turn), steers_of(steers), json.loads(receipted), json.loads(unsent))


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """turn_started.lua bound no turn: the coordinator asked for a cancel."""


def turn_started(reply: Sequence[Any]) -> TurnStart | CancelRequested:
    """turn_started.lua: `{'ok', turnId, receipt offsets JSON array, receipts waiting for the
    send (JSON array), inflight JSON... (only with drain)} | {'cancelled'}`."""
    if _word(reply, "ok", "cancelled") == "cancelled":
        return CancelRequested()
    return TurnStart.decode(reply)


@dataclass(frozen=True, slots=True)
class Taken:
    """What the idle wait's take found (take.lua: `{'ok', cancelRequested, cursor, inflight JSON...}`)."""

    steers: list[PendingSteer]  # every steer in flight now, in offset order
    cancel_requested: bool
    cursor: str  # the journal's newest entry id: block on the journal after it

    @staticmethod
    def decode(reply: Sequence[Any]) -> Taken:
        _, cancel, cursor, *steers = reply
        return Taken(steers_of(steers), as_text(cancel) == "1", as_text(cursor))


@dataclass(frozen=True, slots=True)
class LeaseCheck:
    """What one heartbeat learns (heartbeat.lua: `{'ok', cancelRequested, steers, interruptTurn}`)."""

    cancel_requested: bool
    steers: int = 0  # pending plus in flight: > 0 means an idle wait has steers to take
    interrupt_turn: int = 0  # the live turn, when an interrupt steer waits for it (README's Managing steers)

    @staticmethod
    def decode(reply: Sequence[Any]) -> LeaseCheck:
        _, cancel, steers, *interrupt = reply  # no interruptTurn: a script loaded before interrupts
        return LeaseCheck(as_text(cancel) == "1", int(steers), int(interrupt[0]) if interrupt else 0)


def drained(reply: Sequence[Any]) -> list[PendingSteer]:
    """turn_ended.lua: `{'ok', inflight JSON...}` (offset order)."""
    _word(reply, "ok")
    _, *steers = reply
    return steers_of(steers)


def undelivered(reply: Sequence[Any]) -> list[int]:
    """finish.lua: `{'ok', undelivered offsets...}`."""
    _word(reply, "ok")
    _, *offsets = reply
    return _offsets(offsets)


def job_number(reply: Sequence[Any]) -> int:
    """release.lua: `{'ok', job number}`: the job that resumes the session."""
    _word(reply, "ok")
    _, number = reply
    return int(number)


def receipt_offsets(reply: Sequence[Any]) -> list[int]:
    """request_sent.lua: `{'ok', receipt offsets JSON array}`."""
    _word(reply, "ok")
    _, receipt = reply
    return _offsets(json.loads(receipt))


@dataclass(frozen=True, slots=True)
class SignalStored:
    """signal.lua: `{'ok', offset, entryId}`."""

    offset: int  # the signal's offset in its session's stream
    entry_id: str

    @staticmethod
    def decode(reply: Sequence[Any]) -> SignalStored:
        _word(reply, "ok")
        _, offset, entry_id = reply
        return SignalStored(int(offset), as_text(entry_id))


# --- the fleet's scripts: model slots, webhooks, triggers, RQ ------------------------------


@dataclass(frozen=True, slots=True)
class SlotAnswer:
    """slot_acquire.lua: `{1, 0, 0}` held, `{0, position, free}` waiting, `{0, 0, 0}` a renew
    of a slot not held."""

    held: bool
    position: int = 0  # in line: 1 = next; 0 when held
    free: int = 0  # slots free when it asked

    @staticmethod
    def decode(reply: Sequence[Any]) -> SlotAnswer:
        held, position, free = reply
        return SlotAnswer(True) if int(held) else SlotAnswer(False, int(position), int(free))


def one_or_zero(reply: Any) -> bool:
    """slot_release.lua, trigger_release.lua, give_back.lua: 1 (done) or 0 (nothing to do)."""
    if int(reply) not in (0, 1):
        raise UnexpectedReply(f"expected 1 or 0, got {reply!r}")
    return int(reply) == 1


def texts(reply: Sequence[Any]) -> list[str]:
    """webhook_claim.lua: the taken records, a JSON text each."""
    return [as_text(item) for item in reply]


def settle_stored(reply: Sequence[Any]) -> bool:
    """webhook_settle.lua: `{'ok'} | {'settled'}`: False when another sender had settled the
    delivery for good already."""
    return _word(reply, "ok", "settled") == "ok"


@dataclass(frozen=True, slots=True)
class PollLease:
    """trigger_lease.lua: `{1, holder}` held by the asker now, `{0, the other holder}` otherwise."""

    held: bool
    holder: str

    @staticmethod
    def decode(reply: Sequence[Any]) -> PollLease:
        held, holder = reply
        return PollLease(int(held) == 1, as_text(holder))


def poll_recorded(reply: Sequence[Any]) -> bool:
    """trigger_polled.lua: `{'ok'} | {'fenced', the holder or ''}`: False when the poll lease
    is no longer the asker's (nothing written)."""
    return _word(reply, "ok", "fenced") == "ok"


def first_record(reply: Sequence[Any]) -> str | None:
    """trigger_record.lua: `{'recorded'} | {'duplicate', the first record's JSON}`: that JSON,
    or None when this record was written."""
    if _word(reply, "recorded", "duplicate") == "recorded":
        return None
    _, first = reply
    return as_text(first)


# --- redis-py's replies: streams and pipelines ----------------------------------------------


def xread_streams(reply: Any) -> list[tuple[str, list[Any]]]:
    """XREAD's reply as (stream, entries) pairs (none when the block timed out): RESP2 gives
    a list of pairs, RESP3 a dict."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(as_text(name), list(entries)) for name, entries in reply.items()]
    return [(as_text(name), list(entries)) for name, entries in reply]


def xread_entries(reply: Any) -> list[Any]:
    """The entries of an XREAD of one stream (none when the block timed out)."""
    return [entry for _, entries in xread_streams(reply) for entry in entries]


def entry_id(entry: Sequence[Any]) -> str:
    """A stream entry's id (XRANGE, XREVRANGE and XREAD give `(id, fields)` pairs)."""
    eid, _ = entry
    return as_text(eid)


def last_entry(entries: Sequence[Any]) -> tuple[str, dict[str, Any]] | None:
    """The last entry of a read, `(id, fields)`: the newest of an XRANGE or XREAD, the only
    one of an XREVRANGE with COUNT 1; None when it found none."""
    if not entries:
        return None
    eid, fields = entries[-1]
    return as_text(eid), fields


def last_id(entries: Sequence[Any]) -> str | None:
    """The id of `last_entry`."""
    last = last_entry(entries)
    return last[0] if last is not None else None


def per_item(replies: Sequence[Any], width: int) -> Iterator[tuple[Any, ...]]:
    """A pipeline's replies when `width` commands were queued for each item, one tuple per item."""
    if len(replies) % width:
        raise UnexpectedReply(f"{len(replies)} replies are not {width} per item")
    for start in range(0, len(replies), width):
        yield tuple(replies[start : start + width])
