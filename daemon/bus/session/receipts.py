"""Steer receipts (README's Managing steers): one steer's state, found by offset or clientMsgId, and a wait
until it settles (delivered, undelivered or retracted).

The journal (`wt:session:{ID}:steers`) is the truth: every change of a steer's state is an
entry there (accept.lua, turn_started/checkpoint.lua's `delivered`, finish.lua's
`undelivered`, retract.lua, edit.lua), so a waiter folds the journal once and then blocks
with `XREAD BLOCK` after the last entry it read, folding what arrives. It never polls the
record: the session ending journals its leftover steers `undelivered`, which wakes it. The
block is sliced (`BLOCK_MS`) so a web thread's socket timeout is never reached; between two
slices the waiter holds no connection, and while it blocks it holds exactly one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from daemon.bus.replies import last_id, xread_entries
from daemon.bus.session.steerbus import SteerBus
from daemon.host.redisconn import as_text
from daemon.schema.records import JournalEntry, SteerFold, SteerView

BLOCK_MS = 1000  # one XREAD BLOCK slice: below the web tier's socket timeout
MAX_WAIT_SECONDS = 60  # README's Managing steers: ?wait=S, S <= 60
READ_BATCH = 500


class SessionMissing(LookupError):
    """The session is unknown (or its keys expired)."""


@dataclass
class Folded:
    """A session's journal folded so far, and the id of the last entry read."""

    fold: SteerFold
    cursor: str

    def view(self, offset: int) -> SteerView | None:
        return self.fold.views.get(offset)


class SteerReceipts:
    def __init__(self, bus: SteerBus, block_ms: int = BLOCK_MS) -> None:
        self.bus = bus
        self.client = bus.client
        self.keys = bus.keys
        self.block_ms = block_ms

    def folded(self, session_id: str) -> Folded:
        """The whole journal, folded; raises SessionMissing."""
        entries = self.bus.journal(session_id)
        if entries is None:
            raise SessionMissing(session_id)
        return Folded(SteerFold().apply(entries), entries[-1].id if entries else "0-0")

    def steer(self, session_id: str, offset: int) -> SteerView | None:
        return self.folded(session_id).view(offset)

    def offset_of(self, session_id: str, client_msg_id: str) -> int | None:
        """The offset the clientMsgId was first accepted as (its dedup entry), if any."""
        raw = self.client.hget(self.keys.session(session_id).dedup, client_msg_id)
        if raw is None:
            return None
        return int(json.loads(as_text(raw))["offset"])

    def wait(
        self,
        session_id: str,
        offset: int,
        seconds: float,
        monotonic: Callable[[], float],
    ) -> SteerView | None:
        """The steer once it is no longer pending, or as it is after `seconds`; None when
        the session has no such steer. Raises SessionMissing."""
        folded = self.folded(session_id)
        view = folded.view(offset)
        deadline = monotonic() + min(max(seconds, 0.0), MAX_WAIT_SECONDS)
        journal = self.keys.session(session_id).journal
        while view is not None and not view.settled:
            remaining = deadline - monotonic()
            if remaining <= 0:
                break
            block = max(min(int(remaining * 1000), self.block_ms), 1)  # 0 would block forever
            entries = xread_entries(
                self.client.xread({journal: folded.cursor}, count=READ_BATCH, block=block)
            )
            last = last_id(entries)
            if last is None:
                continue
            folded.fold.apply([JournalEntry.from_stream(as_text(eid), fields) for eid, fields in entries])
            folded.cursor = last
            view = folded.view(offset)
        return view
