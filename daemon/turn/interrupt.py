"""Interrupt steers (README's Managing steers, `"mode": "interrupt"`): cutting the live turn short.

Who does what:
- `accept.lua`, for an interrupt steer that finds a live turn, sets the record's
  `interruptTurn` to that turn and publishes `<sessionId> <turnId>` on `wt:interrupts`;
- one listener per worker process (daemon/bus/session/interruptlistener.py) hears it and calls
  `request(turn)` on the session's `TurnInterrupt` (and `cancel()` when `cancel.lua`
  announced a cancel the same way); every heartbeat reply does the same (the safety net for
  a missed message, within a heartbeat interval: every tick while something of the turn
  waits to be cut and no subscribed listener hears the session, `needs_ticks`);
- the session's channel `begin`s the interrupt when a turn is bound and `end`s it at the
  turn end (daemon/bus/session/steerbus.py), so a request only ever cuts the turn it was meant for;
- what runs during the turn watches it: the model call is abandoned (`abandonable`: its
  stream closed, its reply never read, and the loop moves on at once), a Bash command is
  killed (`watch`), the tool calls not yet started get `skipped_result`;
- the turn end then drains as at any other: the interrupt steer and every other pending
  one go, in offset order, into the next model call, which starts at once.

Nothing here touches Redis: the notification arrives from outside, so one listener can
serve every session of a process.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from daemon.turn.callthreads import CALL_THREADS
from daemon.turn.messages import ToolResultBlock, ToolUseBlock

log = logging.getLogger(__name__)

T = TypeVar("T")

SKIPPED_TEXT = (
    "[WorkTrain] Not run: the coordinator interrupted this turn before this tool call started. "
    "Read the coordinator's message below before you decide whether to call it again."
)
STOPPED_NOTE = (
    "[WorkTrain] Stopped: the coordinator interrupted this turn while the command ran; "
    "the command and everything it started were killed."
)


class Interrupted(Exception):
    """The live turn was interrupted: what was running was abandoned (nothing of it is kept)."""


class Abandoned(BaseException):
    """Raised inside an abandoned call's own thread when it tries to go on (a BaseException,
    so that no `except Exception` in a library on the way retries or reports it)."""


class CallHandle:
    """What a call running under `abandonable` uses to say how to stop it once it has
    something open (a model stream): `opened(close)`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._close: Callable[[], None] | None = None
        self.abandoned = False

    def opened(self, close: Callable[[], None]) -> None:
        """Register how to close what the call just opened. An already abandoned call
        closes it at once and stops (Abandoned)."""
        with self._lock:
            self._close = close
            abandoned = self.abandoned
        if abandoned:
            _quietly(close)
            raise Abandoned

    def abandon(self) -> None:
        with self._lock:
            self.abandoned = True
            close = self._close
        if close is not None:
            _quietly(close)


def _quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:  # a stream that is already broken cannot be closed twice: say so, go on
        log.warning("interrupt: closing an abandoned call failed", exc_info=True)


@dataclass
class _Outcome(Generic[T]):
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None


class TurnInterrupt:
    """One attempt's interrupt state: which turn is live, whether it was asked to stop.

    Thread-safe: `request` comes from a listener thread or the heartbeat thread, the rest
    from the loop (and the tools it runs)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._lock = threading.Lock()
        self._live: int | None = None
        self._requested = 0  # the newest turn an interrupt was asked for
        self._set = False
        self._watchers: list[Callable[[], None]] = []
        self.cut = False  # something of the live turn was cut short (turn_interrupted is due)
        self.cancelled = False  # a cancel was requested: the live turn is cut, none follows
        self.stopping = False  # the worker is stopping: the live turn is cut, the session handed over
        # whether a subscribed listener hears this session's interrupts and cancels (set by
        # InterruptListener.watching): its heartbeat need not come every tick then
        self.heard: Callable[[], bool] = _unheard

    @property
    def is_set(self) -> bool:
        return self._set

    def begin(self, turn: int) -> None:
        """A turn was bound. A request for it that came first (the announcement can beat
        the reply of turn_started.lua) sets the interrupt at once."""
        with self._lock:
            self._live = turn
            # a stop that came between the loop's check and this turn cuts the turn at once
            self._set = self._requested == turn or self.stopping
            self._watchers = []
            self.cut = False

    def end(self) -> None:
        """The turn ended (its drain took every pending steer): later requests for it are void."""
        with self._lock:
            self._live = None
            self._set = False
            self._watchers = []

    def request(self, turn: int) -> bool:
        """An interrupt steer waits for `turn`; True when that is the live turn (now set)."""
        with self._lock:
            self._requested = max(self._requested, turn)
            if self._live != turn:
                return False
            if self._set:
                return True
            self._set = True
            watchers = list(self._watchers)
        log.info("session %s: turn %d interrupted by the coordinator", self.session_id, turn)
        for watcher in watchers:
            _quietly(watcher)
        return True

    def cancel(self) -> None:
        """A cancel of the session was requested (a heartbeat read it): the live turn is cut
        as by an interrupt — a running Bash is killed, a model call abandoned — and the
        next turn's start answers `cancelled` (docs/durability.md: a cancel stops a running tool
        within a second)."""
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
        self._cut("cancel requested")

    def stop(self) -> None:
        """The worker is stopping (a warm shutdown: `up`'s Ctrl-C, SIGTERM): the live turn
        is cut as by an interrupt — a model call in flight abandoned at once, a running Bash
        killed — so the loop reaches its turn boundary now and hands the session over,
        instead of holding the shutdown until the call answers (issue 33). Unlike `cancel`,
        the session goes on: the next worker resumes it from the checkpoint."""
        with self._lock:
            self.stopping = True
        self._cut("the worker is stopping")

    def _cut(self, why: str) -> None:
        """Flag the live turn (once) and tell its watchers: the call in flight is abandoned."""
        with self._lock:
            if self._live is None or self._set:
                return
            self._set = True
            watchers = list(self._watchers)
        log.info("session %s: %s: turn %s cut short", self.session_id, why, self._live)
        for watcher in watchers:
            _quietly(watcher)

    @property
    def watched(self) -> bool:
        """Something of the live turn waits to be cut (a Bash command, a model call)."""
        with self._lock:
            return bool(self._watchers)

    @property
    def needs_ticks(self) -> bool:
        """Its heartbeat should come every tick, so a cancel reaches what waits to be cut
        within a second: no subscribed listener hears the session (docs/benchmarks.md
        section 17: a model call of 10 s cost ten heartbeats)."""
        return self.watched and not self.heard()

    @contextmanager
    def watch(self, on_interrupt: Callable[[], None]) -> Iterator[None]:
        """Call `on_interrupt` (from the requesting thread) if the live turn is interrupted
        while the block runs; at once if it already is."""
        with self._lock:
            already = self._set
            if not already:
                self._watchers.append(on_interrupt)
        if already:
            on_interrupt()
        try:
            yield
        finally:
            with self._lock:
                if on_interrupt in self._watchers:
                    self._watchers.remove(on_interrupt)

    def abandonable(self, call: Callable[[CallHandle], T]) -> T:
        """Run `call` in another thread (one the process keeps: daemon/turn/callthreads.py) and
        return what it returns (or raise what it raises) — unless the turn is interrupted
        first: then the call is told to close what it opened (`CallHandle.opened`), its
        result is never looked at, and this raises Interrupted at once. The abandoned call
        ends on its own when its closed stream fails (or, had nothing been opened yet, when
        it opens one and finds it abandoned), and its thread is free again."""
        if self._set:
            self.cut = True
            raise Interrupted(self.session_id)
        handle = CallHandle()
        outcome: _Outcome[T] = _Outcome()
        woken = threading.Event()

        def run() -> None:
            try:
                outcome.value = call(handle)
            except Abandoned:
                log.debug("session %s: an abandoned call stopped", self.session_id)
            except BaseException as exc:  # noqa: BLE001 -- handed to the caller, who re-raises it
                outcome.error = exc
            finally:
                outcome.done.set()
                woken.set()

        # the caller's context variables go with the call (the send guard, daemon/agent/sendguard.py)
        context = contextvars.copy_context()
        with self.watch(woken.set):
            CALL_THREADS.run(lambda: context.run(run))  # a kept thread (daemon/turn/callthreads.py)
            woken.wait()
        if outcome.done.is_set():  # it finished first (or at the same moment): its answer stands
            if outcome.error is not None:
                raise outcome.error
            return outcome.value  # type: ignore[return-value]
        handle.abandon()
        self.cut = True
        raise Interrupted(self.session_id)


def _unheard() -> bool:
    return False


def skipped_result(use: ToolUseBlock) -> ToolResultBlock:
    """The tool_result of a tool call the interrupt kept from starting."""
    return ToolResultBlock(tool_use_id=use.id, content=SKIPPED_TEXT, is_error=True)
