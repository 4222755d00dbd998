"""When `worktrain up` restarts a dead worker process, and when it gives up: pure, no clock.

The supervisor reports each death with the child's start and death times (monotonic
seconds); the answer is `Restart(delay)` or `GiveUp`. The defaults:

- backoff: the first restart after 0.5 s, doubling with each consecutive crash, at most 30 s
  (0.5, 1, 2, 4, 8, 16, 30, 30, ...), so a crash loop never spins a core;
- a child that stayed up `stable_seconds` (30 s) was healthy: its next crash starts the
  backoff over at 0.5 s (a worker that crashes once a day restarts at once, every time);
- `max_crashes` (5) crashes within `window_seconds` (60 s): give up. A crash that quick and
  that often is no transient fault (a bad setting, a broken install, a Redis that refuses
  us): restarting would only hide it, so the stack stops and says why.

A worker that crashes at its start every time is thus restarted after 0.5, 1, 2 and 4 s and
given up on at its fifth crash, about 8 s (plus its start-up times) after the first.
A worker that crashes after running a while (longer than the backoff) is restarted for as
long as its crashes stay under 5 a minute; its backoff grows to 30 s unless it stays up 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RestartPolicy:
    first_delay: float = 0.5
    factor: float = 2.0
    max_delay: float = 30.0
    stable_seconds: float = 30.0  # up this long: the next crash starts the backoff over
    max_crashes: int = 5  # this many crashes within window_seconds: give up
    window_seconds: float = 60.0

    def delay(self, streak: int) -> float:
        """Seconds before the restart that follows the `streak`-th consecutive crash (1-based)."""
        return float(min(self.first_delay * self.factor ** max(streak - 1, 0), self.max_delay))


@dataclass(frozen=True)
class Restart:
    delay: float  # seconds to wait before starting the child again
    crashes: int  # crashes within the window so far, this one included


@dataclass(frozen=True)
class GiveUp:
    crashes: int
    window_seconds: float


Decision = Restart | GiveUp


@dataclass
class CrashHistory:
    """One child's crashes: the ones within the window, and the current streak."""

    policy: RestartPolicy = field(default_factory=RestartPolicy)
    recent: list[float] = field(default_factory=list)  # death times within the window
    streak: int = 0  # consecutive crashes since the child last stayed up stable_seconds

    def record(self, *, started: float, died: float) -> Decision:
        """A death of the child started at `started`: restart it (after how long) or give up."""
        policy = self.policy
        if died - started >= policy.stable_seconds:
            self.streak = 0
        self.streak += 1
        self.recent = [t for t in self.recent if died - t < policy.window_seconds] + [died]
        if len(self.recent) >= policy.max_crashes:
            return GiveUp(len(self.recent), policy.window_seconds)
        return Restart(policy.delay(self.streak), len(self.recent))
