"""What a checkpoint writes to the session record: only the fields that changed since this
attempt last wrote them (docs/benchmarks.md section 17).

Each checkpoint carries the record fields of what it stores (the workflow position, the
usage and its cost, compactions, the files read: `SessionState.fields()`), and a turn makes
two or three checkpoints that mostly carry the same values. Sending them all each time cost
Redis a JSON decode and an HSET per field per checkpoint (~45 HSETs a turn) and the worker
the JSON. So the attempt remembers what it wrote, and a checkpoint sends what differs.

What keeps that exact: these fields have one writer while the attempt runs — its
checkpoints — except `waitingFor`, which `mark_waiting.lua` also writes: it is always sent.
A checkpoint that failed (an exception: refused, Redis down) changes nothing here, so its
fields are sent again by the next one; one that ran twice wrote the same values. A new
attempt starts with nothing remembered: its first checkpoint writes every field.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

# Written by other scripts of the attempt as well (mark_waiting.lua): never skipped.
SHARED_FIELDS = frozenset({"waitingFor"})


class WrittenFields:
    """The record fields one attempt's checkpoints wrote, and what a new checkpoint must send."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: dict[str, str | int] = {}

    def changed(self, fields: Mapping[str, str | int]) -> dict[str, str | int]:
        """The fields whose value differs from what this attempt last wrote (and the shared ones)."""
        with self._lock:
            written = self._written
            return {
                name: value
                for name, value in fields.items()
                if name in SHARED_FIELDS or written.get(name, _UNSET) != value
            }

    def wrote(self, fields: Mapping[str, str | int]) -> None:
        """A checkpoint that carried `fields` succeeded."""
        with self._lock:
            self._written.update(fields)


_UNSET = object()
