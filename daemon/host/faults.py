"""Fault injection for the crash tests (tests/crash): SIGKILL this worker at a named point.

A crash test needs kill points narrower than any outside `kill -9` can hit ("right after the
drain" is microseconds wide), so the worker calls `crash_point(plan, name)` at named points
(the loop's through its `CrashPoints` hook, daemon/agent/crashpoints.py, which the runner
registers only when a plan exists):

- `before_claim`      the job has been taken from the queue, the session not yet claimed
                      (daemon/session/runner.py; `"kill": "worker"` kills the RQ worker that took
                      the job instead of the work horse, leaving the job `started` in RQ)
- `before_turn`       the top of a turn, before it is bound (`turn_started`)
- `before_send`       the turn is bound and its request built, right before the request
                      leaves (before its steers are journalled delivered: docs/durability.md)
- `after_model`       the model's reply is in, before it is journaled
- `after_reply`       the reply is journaled (docs/durability.md), before its first tool starts
- `in_tool`           before each tool call (occurrence 2 = the first tool of the turn ran)
- `after_tool`        a tool call has ended, before its result is journaled
- `after_drain`       `turn_ended` returned (steers in flight), before the checkpoint
- `after_checkpoint`  the turn's checkpoint is written
- `fork_pinned`       a worktree fork's first placement: the snapshot it starts from is pinned
                      in the main repository, its own repository not made yet
                      (daemon/session/snapshotting.py; a fork's context is its source's, so a
                      source dispatched with this point runs clean and arms its forks)

It is off unless the worker's own environment has `WORKTRAIN_FAULTS=1`; then a session asks
for one fault in its dispatch `context`: `"worktrainFault": {"point": "after_drain",
"occurrence": 2}` (the second time the loop passes that point). Only attempt 1 of a session
is armed, so the resumed attempt runs clean. In production `plan` is None and each point
costs one `is None` test.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)

ENV_GATE = "WORKTRAIN_FAULTS"
CONTEXT_KEY = "worktrainFault"
POINTS = (
    "before_claim", "before_turn", "before_send", "after_model", "after_reply", "in_tool", "after_tool",
    "after_drain", "after_checkpoint", "fork_pinned",
)  # fmt: skip
Point = Literal[
    "before_claim", "before_turn", "before_send", "after_model", "after_reply", "in_tool", "after_tool",
    "after_drain", "after_checkpoint", "fork_pinned",
]  # fmt: skip


class FaultSpec(BaseModel):
    """The `worktrainFault` object of a dispatch context."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    point: Point
    occurrence: int = Field(default=1, ge=1)
    # worker: the RQ worker (this horse's parent); raise: no kill, the point raises
    # InjectedFault (one session's bug, in a process that runs others: tests/crash)
    kill: Literal["self", "worker", "raise"] = "self"


class InjectedFault(RuntimeError):
    """Raised at a fault point by `"kill": "raise"`: an unexpected error in one session."""


def raise_fault() -> None:
    raise InjectedFault("fault injection: an unexpected error in this session")


def sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


_JOBS_IN_WORKER = False  # set by a worker that runs its jobs in threads: no horse to spare


def worker_runs_jobs_itself() -> None:
    """This process is the RQ worker and runs its jobs itself (`--concurrency` > 1)."""
    global _JOBS_IN_WORKER
    _JOBS_IN_WORKER = True


def sigkill_parent() -> None:
    """Kill the RQ worker that took the job: the parent of this work horse (which dies with
    it, lifeline), or this very process when it runs its jobs in threads."""
    if _JOBS_IN_WORKER:
        sigkill_self()
    os.kill(os.getppid(), signal.SIGKILL)
    signal.pause()  # wait here for the parent-death signal: nothing more runs


def faults_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(ENV_GATE) == "1"


@dataclass
class FaultPlan:
    """Die at the `occurrence`-th pass through `point` (counted within this attempt)."""

    point: str
    occurrence: int
    kill: Callable[[], None] | None = None  # None: SIGKILL this process
    seen: int = field(default=0, init=False)

    def hit(self, name: str) -> None:
        if name != self.point:
            return
        self.seen += 1
        if self.seen == self.occurrence:
            verb = "raising in" if self.kill is raise_fault else "killing"
            pid = os.getpid()
            log.warning("fault injection: %s pid %d at %s (occurrence %d)", verb, pid, name, self.seen)
            (self.kill or sigkill_self)()


def plan_for(
    context: Mapping[str, Any] | None,
    attempt: int,
    environ: Mapping[str, str] = os.environ,
    kill: Callable[[], None] | None = None,
) -> FaultPlan | None:
    """The plan a session's context asks for, if faults are enabled here and this is attempt 1."""
    if not faults_enabled(environ) or attempt != 1 or not context or CONTEXT_KEY not in context:
        return None
    try:
        spec = FaultSpec.model_validate(context[CONTEXT_KEY])
    except ValidationError as exc:
        log.warning("ignoring an invalid %s in the session context: %s", CONTEXT_KEY, exc)
        return None
    chosen = {"worker": sigkill_parent, "raise": raise_fault}.get(spec.kill)
    return FaultPlan(spec.point, spec.occurrence, kill or chosen)


def crash_point(plan: FaultPlan | None, name: Point) -> None:
    if plan is not None:
        plan.hit(name)
