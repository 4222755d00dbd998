"""The threads of one web process that long-held requests may take, together (docs/security.md).

Three kinds of request can hold a server thread for long: an SSE stream (as long as the
session), a receipt wait (`?wait=`, up to 60 s) and, under granian, a body that arrives
slowly (its read has no timeout: web/deadlines.py). Each had a cap of its own, and the caps
added up to every thread: 4 streams + 4 waits took all 8 threads of a granian worker, and
`/readyz`, reads and steers timed out while they were held.

`ThreadBudget(threads)` bounds them together, per process:
- `pool`: `threads - RESERVED` slots shared by all three kinds, so `RESERVED` threads
  (2) are always free for requests that hold nothing for long (`/readyz`, reads, cancels);
- `holding`: `pool - BODY_RESERVE` of those slots at most go to streams and waits, so
  `BODY_RESERVE` slots (2) are always left for requests with a body: a steer is served
  while every stream and wait slot is taken.
A stream or a wait that finds no slot answers 503 at once (`too_many_streams`,
`too_many_waits`, with Retry-After); a body waits briefly for one (web/deadlines.py).
"""

from __future__ import annotations

import threading
from typing import Protocol

RESERVED = 2  # threads never taken by a long-held request
BODY_RESERVE = 2  # of the pool, slots streams and waits never take


class Slots(Protocol):
    """What a holder of one long-held slot needs: a semaphore's two calls."""

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool: ...

    def release(self) -> None: ...


class ThreadBudget:
    """The shared slots of one process (see the module doc)."""

    def __init__(self, threads: int, body_reserve: int = BODY_RESERVE) -> None:
        """`body_reserve` 0: bodies are not bounded here (gunicorn times their reads out)."""
        self.threads = threads
        self.pool_size = max(1, threads - RESERVED)
        self.holding_size = max(1, self.pool_size - body_reserve)
        self.pool = threading.BoundedSemaphore(self.pool_size)
        self.holding = threading.BoundedSemaphore(self.holding_size)

    def holder(self, own_cap: int) -> Slots:
        """Slots for one kind of long-held request (streams, waits): at most `own_cap` of that
        kind, and within the budget shared with the others."""
        return BudgetedSlots(threading.BoundedSemaphore(own_cap), self)


class BudgetedSlots:
    """A kind's own cap, then a slot of `holding`, then one of `pool`: all or nothing."""

    def __init__(self, own: threading.BoundedSemaphore, budget: ThreadBudget) -> None:
        self.own = own
        self.budget = budget

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        taken: list[threading.BoundedSemaphore] = []
        for semaphore in (self.own, self.budget.holding, self.budget.pool):
            if not semaphore.acquire(blocking=False):
                for held in reversed(taken):
                    held.release()
                return False
            taken.append(semaphore)
        return True

    def release(self) -> None:
        self.budget.pool.release()
        self.budget.holding.release()
        self.own.release()
