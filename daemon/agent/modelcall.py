"""One session's model calls, at the edge: the fleet-wide cap, and retries through API weather.

`ModelCalls.complete(turn, request)` is a turn's call as the loop sees it: a reply, or an
`Ending` (model_error when the retries ran out or the API refused for good; cancelled or
released when the session was cancelled or the worker stopped while it waited), or
`PromptTooLong` raised for the compactor. Around every single call:

- with a cap (`CallSettings.slots`), a slot is taken first (daemon/bus/fleet/modelslots.py) and given
  back right after the call, whatever happened; a session that has to wait for one shows
  `waitingFor: "model_slot"`, is woken when a release names it next in line, and asks
  again at least every `ASK_SECONDS` in any case;
- a failure the policy retries (daemon/agent/retrypolicy.py) emits `model_retry` and waits
  (`waitingFor: "model_retry"`), never holding a slot while it waits.

Every wait is a `Pause` (daemon/agent/waiting.py): the turn stays live, a cancel ends it within
a quarter of a second (`CHECK_SECONDS`), a stop (SIGTERM) at once, the lease is renewed.
An interrupt steer (README's Managing steers) ends the turn's call, its backoff and its wait for a slot at
once: daemon.turn.interrupt.Interrupted is raised out to the loop (a summary call for the
compactor, `once` without an interrupt, is not cut: the next call would need it again).
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from daemon.agent.endings import Ending
from daemon.agent.model import Model, ModelApiError, ModelError, ModelReply, ModelRequest
from daemon.agent.prices import cost_usd
from daemon.agent.retrypolicy import Failure, Verdict, classify, next_wait
from daemon.agent.sendguard import SendGate, SendRefused, gated
from daemon.agent.waiting import CHECK_SECONDS, Pause
from daemon.bus.fleet.metrics import (
    COST,
    MODEL_CALL_SECONDS,
    MODEL_CALLS,
    MODEL_RETRIES,
    NULL_RECORDER,
    TOKENS,
    MetricsRecorder,
    retry_status,
)
from daemon.bus.fleet.modelslots import ModelSlots, call_token
from daemon.host import tracing
from daemon.host.clock import Clock
from daemon.schema.events import ModelRetry
from daemon.schema.records import SessionStatus
from daemon.tools import Emitter
from daemon.turn.interrupt import Interrupted, TurnInterrupt

ASK_SECONDS = 1.0  # a waiter for a slot asks again at least this often (it keeps its place)
TOO_LONG_RE = re.compile(r"(\d+)\s*tokens?\s*>\s*(\d+)")


@dataclass(frozen=True)
class CallSettings:
    """How a worker calls the model (docs/DEVELOPING.md; README configuration)."""

    retry_seconds: float = 600.0  # WORKTRAIN_MODEL_RETRY_SECONDS, per turn
    context_tokens: int = 200_000  # WORKTRAIN_CONTEXT_TOKENS
    compact_at: float = 0.8  # WORKTRAIN_COMPACT_AT
    slots: ModelSlots | None = None  # WORKTRAIN_MAX_MODEL_CALLS > 0: the fleet-wide cap
    wake: threading.Event | None = None  # set to cut every wait short (the SIGTERM handler's)
    rng: random.Random | None = None  # the backoff's jitter (tests seed it)
    metrics: MetricsRecorder = NULL_RECORDER  # the process's fleet metrics (daemon/bus/fleet/metrics.py)


class PromptTooLong(Exception):
    """The API answered 400 "prompt is too long": the compactor's turn (docs/DEVELOPING.md)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.describe())
        self.failure = failure
        match = TOO_LONG_RE.search(failure.message)
        self.tokens = int(match.group(1)) if match else None  # what the API counted


class ModelCalls:
    def __init__(
        self,
        model: Model,
        session_id: str,
        pause: Pause,
        events: Emitter,
        clock: Clock,
        settings: CallSettings,
    ) -> None:
        self.model = model
        self.session_id = session_id
        self.pause = pause
        self.events = events
        self.clock = clock
        self.settings = settings
        # Run right before a request of this turn leaves (after the guard): the loop's
        # receipt of the steers it carries (daemon/agent/loop.py `Receipts`)
        self.before_send: Callable[[], None] | None = None

    def complete(self, turn: int, request: ModelRequest) -> ModelReply | Ending:
        """The turn's call, retried until it works, the budget runs out or it cannot work."""
        interrupt = self.pause.channel.interrupt
        failures = 0
        first_failed_at = 0.0
        while True:
            try:
                answer = self.once(request, interrupt)
            except ModelApiError as exc:
                failure = exc.failure
            except ModelError as exc:
                return Ending(SessionStatus.FAILED, "model_error", str(exc))
            else:
                return answer
            verdict = classify(failure)
            if verdict is Verdict.PROMPT_TOO_LONG:
                raise PromptTooLong(failure)
            if verdict is Verdict.FAIL:
                return Ending(SessionStatus.FAILED, "model_error", failure.describe())
            failures += 1
            now = self.clock.monotonic()
            first_failed_at = first_failed_at if failures > 1 else now
            spent = now - first_failed_at
            wait = next_wait(failure, failures, spent, self.settings.retry_seconds, self.settings.rng)
            if wait is None:
                return gave_up(failure, failures, spent)
            self.settings.metrics.count(MODEL_RETRIES, status=retry_status(failure.status, failure.timed_out))
            self.events.emit(
                ModelRetry(
                    sessionId=self.session_id,
                    turnId=turn,
                    status=failure.status,
                    attempt=failures,
                    waitSeconds=round(wait, 3),
                    error=f"{failure.error_type}: {failure.message}"[:300],
                )
            )
            with self.pause.waiting_for("model_retry"):
                if ending := self.pause.sleep(wait, interrupt):
                    return ending

    def once(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply | Ending:
        """One call, through the fleet-wide cap when there is one. Guarded (docs/durability.md): a
        stale attempt takes no slot and makes no call (`Fenced` is raised out of the loop).
        With `interrupt`, the call and its wait for a slot end when the turn is interrupted."""
        self.pause.channel.guard()
        slots = self.settings.slots
        if slots is None:
            return self.measured(request, interrupt)
        token = call_token(self.session_id)
        if ending := self.take_slot(slots, token, interrupt):
            return ending
        with slots.holding(token):
            self.pause.channel.guard()  # the wait for the slot may have outlived the lease
            return self.measured(request, interrupt)

    def measured(self, request: ModelRequest, interrupt: TurnInterrupt | None) -> ModelReply:
        """The model's call, counted (in flight, result, seconds, tokens: docs/operations.md)."""
        metrics = self.settings.metrics
        result = "error"
        started = time.monotonic()  # real seconds, whatever clock the loop runs on
        try:
            with metrics.model_call(), tracing.model_call_span({"worktrain.session_id": self.session_id}):
                reply = self.sent(request, interrupt)
            result = "ok"
        except Interrupted:
            result = "interrupted"
            raise
        except ModelApiError:
            result = "api_error"
            raise
        finally:
            metrics.count(MODEL_CALLS, result=result)
            metrics.observe(MODEL_CALL_SECONDS, time.monotonic() - started)
        usage = reply.usage
        for kind, tokens in zip(
            ("input", "output", "cache_read", "cache_write"),
            (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens),
            strict=True,
        ):
            metrics.count(TOKENS, tokens, kind=kind)
        model = getattr(self.model, "model", None)
        if isinstance(model, str) and (cost := cost_usd(model, usage)) is not None:
            metrics.count(COST, round(cost * 1_000_000), model=model)
        return reply

    def sent(self, request: ModelRequest, interrupt: TurnInterrupt | None) -> ModelReply:
        """The call, with the guard checked again right before its request's bytes leave
        (daemon/agent/sendguard.py: the SDK client's request hook)."""
        attempt = getattr(self.pause.channel, "attempt", "")
        gate = SendGate(self.pause.channel.guard, self.before_send, f"{self.session_id}/{attempt}")
        try:
            with gated(gate):
                if not getattr(self.model, "sends_through_gate", False):
                    gate.check()  # a model that sends no HTTP through the SDK client (tests)
                return self.model.complete(request, interrupt)
        except SendRefused as refused:
            raise refused.cause from None

    def take_slot(
        self, slots: ModelSlots, token: str, interrupt: TurnInterrupt | None = None
    ) -> Ending | None:
        """Hold a slot for `token`, waiting in line if need be; an Ending if the wait was cut.

        The fast path is one round trip. A waiter sleeps until a release names it (the
        listener sets `woken`), asking again at least every ASK_SECONDS, and watches its
        session between slices (a cancel, a stop, a lost lease)."""
        if slots.try_acquire(token).held:
            return None
        taken = False
        try:
            with (
                slots.waiting(token) as woken,
                self.pause.waiting_for("model_slot"),
                self._cut(interrupt, woken),
            ):
                asked = -ASK_SECONDS  # ask at once: a release may have come before `waiting`
                while True:
                    if interrupt is not None and interrupt.is_set:
                        raise Interrupted(self.session_id)
                    if ending := self.pause.check():
                        return ending
                    now = self.clock.monotonic()
                    if woken.is_set() or now - asked >= ASK_SECONDS:
                        woken.clear()
                        asked = now
                        if slots.try_acquire(token).held:
                            taken = True
                            return None
                    self.clock.sleep(CHECK_SECONDS, woken)
        finally:
            if not taken:
                slots.release(token)  # leave the line (or give back a slot taken at the last ask)

    @staticmethod
    def _cut(interrupt: TurnInterrupt | None, woken: threading.Event) -> AbstractContextManager[None]:
        """An interrupt wakes the slot wait at once (it then raises Interrupted)."""
        return interrupt.watch(woken.set) if interrupt is not None else nullcontext()


def gave_up(failure: Failure, failures: int, spent: float) -> Ending:
    outcome = "stalled" if failure.timed_out else "model_error"
    detail = f"{failure.describe()} (still failing after {failures} call(s) over {spent:.0f}s of retries)"
    return Ending(SessionStatus.FAILED, outcome, detail)
