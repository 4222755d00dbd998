"""The checkpoint a turn's end writes in the same step as its drain (turn_ended.lua's ARGV[11..]).

A turn used to end with three round trips, one after the other: the last tool's result
journaled (checkpoint.lua), the drain (turn_ended.lua), then the turn's user message
checkpointed (checkpoint.lua again). The user message depends on the drain only through the
steers it takes, and most turn ends take none; so the loop hands the drain the message it
would store without steers, and the script stores it when no steer is in flight after the
drain — else it stores the turn's results so far as the journal's partial entry, and the
loop checkpoints the message with the steers as before (docs/durability.md). Once the
workflow is done the message never depends on the steers (they are left in flight for
`finish.lua` to journal undelivered), and it is stored whatever the drain took.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import orjson


class Store(StrEnum):
    ALWAYS = "always"
    IF_NO_STEERS = "if_none"


@dataclass(frozen=True)
class EndCheckpoint:
    """What turn_ended.lua stores with the drain: `messages` after the first `keep` history
    entries (or, under IF_NO_STEERS when steers come, `partial`), and the record's fields."""

    store: Store
    keep: int
    messages: Sequence[str]  # the turn's user message, JSON (none: the turn added nothing)
    partial: str = ""  # the turn's results so far as the journal's entry; "" if journaled already
    fields: Mapping[str, str | int] = field(default_factory=dict)

    def stored(self, steers: int) -> bool:
        """Whether the script stored `messages`, given how many steers it returned."""
        return self.store is Store.ALWAYS or steers == 0

    def args(self, fields: Mapping[str, str | int]) -> list[str | int | bytes]:
        """ARGV[11..], with `fields` the record fields to write (those that changed)."""
        return [
            self.store.value,
            self.keep,
            orjson.dumps(dict(fields)) if fields else "",
            self.partial,
            *self.messages,
        ]
