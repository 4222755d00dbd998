"""The worker-side scripts' replies, each decoded in one place into what it means.

A Lua script answers a flat array (Redis has no other reply shape for a script): a word,
then its fields in a fixed order, then, for some, a list. Each shape below names those
positions once, next to the script's `Returns` line in daemon/bus/lua/<script>.lua, so the
bus's callers read fields by name (`Claim.attempt`) instead of slicing positions
(`reply[6:]`). A refusal (`{'fenced', reason}`) never gets here: `SessionChannel.answer`
raises `Fenced` first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.bus.records import PendingSteer
from daemon.host.redisconn import as_text


def steers_of(raw: Sequence[Any]) -> list[PendingSteer]:
    """The in-flight (or pending) steers a reply ends with, as JSON texts, offset order."""
    return [PendingSteer.model_validate_json(item) for item in raw]


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
    `{'ok', attempt, historyLength, cancelRequested, handedOver, receipt, inflight...}`)."""

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
class TurnStart:
    """A turn just bound as the live turn (turn_started.lua:
    `{'ok', turnId, receipt offsets JSON, unsent offsets JSON, steers...}`)."""

    turn: int
    steers: list[PendingSteer]  # with drain: every steer not yet delivered, in offset order
    receipted: list[int]  # offsets journalled delivered into this turn's request so far
    unsent: list[int] = field(default_factory=list)  # checkpointed, journalled when the request leaves

    @staticmethod
    def decode(reply: Sequence[Any]) -> TurnStart:
        _, turn, receipted, unsent, *steers = reply
        return TurnStart(int(turn), steers_of(steers), json.loads(receipted), json.loads(unsent))


@dataclass(frozen=True, slots=True)
class Taken:
    """What the idle wait's take found (take.lua: `{'ok', cancelRequested, cursor, inflight...}`)."""

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
        interrupt = int(reply[3]) if len(reply) > 3 else 0  # a script loaded before interrupts
        return LeaseCheck(as_text(reply[1]) == "1", int(reply[2]), interrupt)


def drained(reply: Sequence[Any]) -> list[PendingSteer]:
    """turn_ended.lua: `{'ok', inflight...}`."""
    return steers_of(reply[1:])


def offsets_after_word(reply: Sequence[Any]) -> list[int]:
    """finish.lua and cancel.lua: `{word, offsets...}` (the undelivered steers)."""
    return [int(x) for x in reply[1:]]
