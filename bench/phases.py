"""CPU time by phase, in any process: the functions of each phase wrapped to add up the CPU
time (`time.thread_time`, the calling thread's own) spent inside them, exclusive of any
phase nested in them, and every Redis round trip (`send_packed_command`: a pipeline is one)
charged to the phase on top of its thread's stack.

Used by bench/turn_cpu.py (a session in the bench's process) and, through
bench/phases_site/sitecustomize.py, by bench/scale_phases.py (every worker process of a
real stack). CPU time, unlike wall time, is not stretched by other processes waiting for a
core: on a loaded machine it moves by ~10-20 % (caches, frequency) where latencies move by
several times. The wrappers cost ~1-2 µs a call, charged to the phase they wrap.
"""

from __future__ import annotations

import collections
import functools
import gc
import importlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

REQUEST = "request build"
HTTP = "HTTP (SDK post, httpx send and receive)"
REPLY = "reply read (SSE parse, reply objects)"
CALL_REST = "model call: the rest (gate, slots, thread hand-off)"
JOURNAL = "journal: each tool's result"
ASK = "loop: the reply's journal, llm_turn_completed"
TURN_START = "turn start (turn_started.lua, its events)"
TURN_END = "turn end (drain, mark, checkpoint)"
LOOP = "loop: the rest of the turn"
TOOL = "the tool (Read)"
EVENTS = "events: batching, session stream (emit.lua)"
MIRROR = "events: mirror (wt:events, JSONL; its thread)"
CARRY = "events: riding with a script (its emit.lua in the pipeline)"
WRITER = "events: the process's writer (its thread)"
HOOKS = "hooks (fence, metrics, tracing)"
METRICS = "metrics (record; flush thread)"
BEATS = "lease beats (their thread)"
WAITER = "idle waiter, interrupt listener, slot keeper (their threads)"
RQ = "RQ (dequeue, job heartbeats, job start and end)"
WEBHOOKS = "webhook sender (its thread)"
GC = "the garbage collector (gc: every generation, whichever thread it ran in)"
CALL_SCRIPT = "{}.lua call (redis-py, the script's reply)"

HOOK_POINTS = (
    "before_turn", "turn_started", "before_send", "after_model", "after_reply", "before_tool",
    "tool_done", "after_tool", "after_drain", "after_checkpoint", "steers_checkpointed",
)  # fmt: skip

HOOK_POINTS = (
    "before_turn", "turn_started", "before_send", "after_model", "after_reply", "before_tool",
    "tool_done", "after_tool", "after_drain", "after_checkpoint", "steers_checkpointed",
)  # fmt: skip

# (module, attribute path, phase). A name this tree does not have is skipped (the bench
# runs against older trees too).
PHASES: tuple[tuple[str, str, str], ...] = (
    ("daemon.agent.model", "wire_request", REQUEST),
    ("daemon.agent.model", "request_bytes", REQUEST),
    ("daemon.agent.model", "AnthropicModel._stream", HTTP),
    ("daemon.agent.model", "read_reply", REPLY),
    ("daemon.agent.model", "reply_from_sdk", REPLY),
    ("daemon.agent.modelcall", "ModelCalls.complete", CALL_REST),
    ("daemon.agent.modelturn", "ModelTurn.__call__", CALL_REST),
    ("daemon.turn.callthreads", "_Worker.run", CALL_REST),
    ("daemon.agent.loop", "journal_results", JOURNAL),
    ("daemon.agent.loop", "ask", ASK),
    ("daemon.agent.loop", "begin_turn", TURN_START),
    ("daemon.agent.loop", "Receipts.__call__", TURN_START),
    ("daemon.agent.loop", "end_turn", TURN_END),
    ("daemon.agent.loop", "drain", TURN_END),
    ("daemon.agent.turnmark", "turn_mark", TURN_END),
    ("daemon.agent.loop", "run_tools", LOOP),
    ("daemon.agent.loop", "run_turn", LOOP),
    ("daemon.agent.loop", "check_limits", LOOP),
    ("daemon.bus.session.steerbus", "SessionChannel.checkpoint", CALL_SCRIPT.format("checkpoint")),
    ("daemon.bus.session.steerbus", "SessionChannel.turn_ended", CALL_SCRIPT.format("turn_ended")),
    ("daemon.bus.session.steerbus", "SessionChannel.start_turn", CALL_SCRIPT.format("turn_started")),
    ("daemon.bus.session.steerbus", "SessionChannel.request_sent", CALL_SCRIPT.format("request_sent")),
    ("daemon.bus.session.steerbus", "SessionChannel.take", CALL_SCRIPT.format("take")),
    ("daemon.tools.base", "Toolbox.call", TOOL),
    ("daemon.agent.turnevents", "TurnBatchingSink.emit", EVENTS),
    ("daemon.agent.turnevents", "TurnBatchingSink.flush", EVENTS),
    ("daemon.bus.session.attemptevents", "AttemptEvents.emit", EVENTS),
    ("daemon.bus.session.attemptevents", "AttemptEvents.flush", EVENTS),
    ("daemon.bus.session.attemptevents", "AttemptEvents.carry", CARRY),
    ("daemon.bus.session.eventwriter", "EventWriter.write_once", WRITER),
    ("daemon.bus.streams.mirror", "EventMirror.submit", MIRROR),
    ("daemon.bus.streams.mirror", "EventMirror.submit_lines", MIRROR),
    ("daemon.bus.streams.eventsink", "EventSink.write", MIRROR),
    ("daemon.bus.streams.eventsink", "EventSink.write_lines", MIRROR),
    *(("daemon.agent.hooks", f"Hooks.{point}", HOOKS) for point in HOOK_POINTS),
    ("daemon.bus.fleet.metrics", "MetricsRecorder.count", METRICS),
    ("daemon.bus.fleet.metrics", "MetricsRecorder.observe", METRICS),
    ("daemon.bus.fleet.metrics", "MetricsRecorder.flush", METRICS),
    ("daemon.bus.session.leasebeats", "LeaseBeats.run_once", BEATS),
    ("daemon.bus.session.journalwaiter", "JournalWaiter._run", WAITER),
    ("daemon.bus.session.interruptlistener", "InterruptListener._run", WAITER),
    ("daemon.bus.fleet.modelslots", "ModelSlots._renew_forever", WAITER),
    ("daemon.webhooks.sender", "WebhookSender._run", WEBHOOKS),
    ("worker.threaded", "ThreadedSessionWorker.maintain_all_heartbeats", RQ),
    ("worker.threaded", "ThreadedSessionWorker.dequeue_job_and_maintain_ttl", RQ),
    ("worker.threaded", "ThreadedSessionWorker._perform", RQ),
    ("worker.jobs", "run_session", "the session job (claim, setup, finish; not in a phase above)"),
)


@dataclass
class Ledger:
    """CPU seconds, calls and Redis round trips per phase, across threads."""

    cpu: collections.Counter[str] = field(default_factory=collections.Counter)
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    trips: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    local: threading.local = field(default_factory=threading.local)

    def stack(self) -> list[list[Any]]:
        stack: list[list[Any]] | None = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def enter(self, phase: str) -> None:
        now = time.thread_time()
        stack = self.stack()
        if stack:
            self.add(stack[-1][0], now - stack[-1][1])
        stack.append([phase, now])

    def leave(self) -> None:
        now = time.thread_time()
        stack = self.stack()
        phase, since = stack.pop()
        self.add(phase, now - since, call=True)
        if stack:
            stack[-1][1] = now

    def add(self, phase: str, seconds: float, call: bool = False) -> None:
        with self.lock:
            self.cpu[phase] += seconds
            if call:
                self.calls[phase] += 1

    def trip(self) -> None:
        stack = self.stack()
        phase = stack[-1][0] if stack else f"other ({threading.current_thread().name.split('-')[0]})"
        with self.lock:
            self.trips[phase] += 1

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self.lock:
            return {"cpu": dict(self.cpu), "calls": dict(self.calls), "trips": dict(self.trips)}


def resolve(module: str, path: str) -> tuple[Any, str] | None:
    try:
        owner: Any = importlib.import_module(module)
    except ImportError:
        return None
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent, None)
        if owner is None:
            return None
    return (owner, name) if hasattr(owner, name) else None


def install(ledger: Ledger) -> Callable[[], None]:
    """Wrap every phase's functions and redis-py's send; returns what undoes it."""
    import redis.connection

    undo: list[Callable[[], None]] = []

    def wrap(owner: Any, name: str, phase: str) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            ledger.enter(phase)
            try:
                return original(*args, **kwargs)
            finally:
                ledger.leave()

        setattr(owner, name, timed)
        undo.append(lambda: setattr(owner, name, original))

    for module, path, phase in PHASES:
        found = resolve(module, path)
        if found is not None:
            wrap(*found, phase)

    def collecting(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            ledger.enter(GC)
        elif ledger.stack():
            ledger.leave()

    gc.callbacks.append(collecting)
    undo.append(lambda: gc.callbacks.remove(collecting))
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        ledger.trip()
        send(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    undo.append(lambda: setattr(redis.connection.AbstractConnection, "send_packed_command", send))

    def uninstall() -> None:
        for action in reversed(undo):
            action()

    return uninstall


@contextmanager
def instrumented(ledger: Ledger) -> Iterator[None]:
    uninstall = install(ledger)
    try:
        yield
    finally:
        uninstall()
