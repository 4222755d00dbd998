"""Fewer event writes per turn: events that no wait follows ride with the next write.

A turn of the agent loop emits turn_started (+ steer_delivered), llm_turn_completed,
tool_call_started and tool_call_completed per tool, and turn_ended: written one by one,
each is a Redis round trip and a JSONL append, and together they were the largest daemon
cost per turn (docs/benchmarks.md, "Per-turn overhead"). `TurnBatchingSink` holds the
events that are followed at once by more loop work, and writes them, in order, with the
next event that comes right before something that can wait: the model call
(turn_started), a tool (tool_call_started), the idle wait (turn_ended of a turn without
tool calls) — or with `flush()`, which the worker calls before it marks the session ended
(so a coordinator that reads `completed` finds every event before session_completed) and
when the job ends whichever way. A turn with one tool call is then 2 writes, not 5.

So every event is in Redis before the loop waits on anything, and a coordinator sees
the same events in the same order. What changes: a worker killed outright (SIGKILL, OOM)
loses the held events of the turn it was in — at most those since its model reply or its
last tool started (llm_turn_completed, tool_call_completed, turn_ended, ...), never a
steer receipt (steer_delivered is written with turn_started).
"""

from __future__ import annotations

import threading

from daemon.bus.events import EventBase, TurnEnded
from daemon.tools import Emitter

HELD_KINDS = frozenset(
    {
        "llm_turn_completed",
        "agent_stuck",
        "tool_call_completed",
        "tool_call_failed",
        "step_advanced",
        "issue_reported",
    }
)


def held(event: EventBase) -> bool:
    kind = getattr(event, "kind", "")
    if isinstance(event, TurnEnded):
        return event.toolCalls > 0  # an idle turn's is written at once: the idle wait follows
    return kind in HELD_KINDS


class TurnBatchingSink:
    """An Emitter in front of another (daemon.bus.events.EventSink): see the module docstring."""

    def __init__(self, inner: Emitter) -> None:
        self.inner = inner
        self._held: list[EventBase] = []
        self._lock = threading.Lock()

    def emit(self, *events: EventBase) -> None:
        with self._lock:  # held across the write: batches reach the sink in emit order
            self._held.extend(events)
            if all(held(event) for event in events):
                return
            batch, self._held = self._held, []
            self.inner.emit(*batch)

    def flush(self) -> None:
        """Write whatever is held (the job's end, whichever way it ends)."""
        with self._lock:
            batch, self._held = self._held, []
            if batch:
                self.inner.emit(*batch)


def flush_held(events: Emitter) -> None:
    """Write what `events` holds, when it is a TurnBatchingSink (other emitters hold nothing)."""
    if isinstance(events, TurnBatchingSink):
        events.flush()
