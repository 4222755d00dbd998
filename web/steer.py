"""`POST /api/v2/sessions/<sessionId>/steer` (README's HTTP API): the hot path.

Parse and validate the body once (pydantic-core, from bytes), check the text's size (413
`steer_too_large`, before Redis is asked anything), one EVALSHA (`SteerBus.accept`: rules
1-5 in Redis, atomically, the pending cap included), serialize the answer. The copy of
`steer_accepted` into the global stream and the JSONL mirror is handed to the background
`EventMirror`, off this path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Response, request

from daemon.bus.eventmirror import EventMirror
from daemon.bus.events import SteerAccepted
from daemon.bus.metrics import NULL_RECORDER, STEER_ACCEPT, STEERS, MetricsRecorder
from daemon.bus.steers import AcceptResult, SteerBus, SteerOutcome
from daemon.host import tracing
from daemon.host.config import Settings
from daemon.host.ids import is_session_id
from web.errors import (
    NO_STEER_CHANNEL,
    ApiError,
    json_response,
    session_not_found,
)
from web.finished import gone
from web.models import SteerBody, parse_steer
from web.requestbasics import json_body

STEER_SPAN = "POST /api/v2/sessions/{sessionId}/steer"  # its traceparent is stored with the steer

# The `outcome` label of worktrain_steers_total for each refusal (docs/operations.md).
OUTCOME_OF_CODE = {
    "steer_too_large": "too_large",
    "session_not_found": "not_found",
    "no_live_turn": "no_live_turn",
    "stale_turn": "stale_turn",
    "too_many_pending_steers": "too_many_pending",
    "client_msg_id_reuse": "reuse",
}

PENDING_RETRY_AFTER_SECONDS = "5"  # the worker drains pending steers at its next turn end


@dataclass(frozen=True)
class SteerLimits:
    """README's HTTP API's caps: the text's UTF-8 size, and how many steers may wait per session."""

    max_bytes: int = 32768
    max_pending: int = 100
    max_edits: int = 20  # WORKTRAIN_MAX_STEER_EDITS: edits of one pending steer

    @classmethod
    def of(cls, settings: Settings) -> SteerLimits:
        return cls(settings.max_steer_bytes, settings.max_pending_steers, settings.max_steer_edits)

    def check_text(self, text: str) -> None:
        """413 `steer_too_large` for a text over `max_bytes` (a steer, or an edit of one)."""
        if len(text.encode()) > self.max_bytes:
            raise steer_too_large(self.max_bytes)


def steer_too_large(limit: int) -> ApiError:
    return ApiError(
        413, "steer_too_large", f"Steer text is over {limit} bytes of UTF-8 (WORKTRAIN_MAX_STEER_BYTES)."
    )


class SteerRoute:
    """The steer logic, shared by the Flask view and the WSGI fast path (web/fastpath.py)."""

    def __init__(
        self,
        bus: SteerBus | None,
        mirror: EventMirror | None,
        limits: SteerLimits | None = None,
        metrics: MetricsRecorder = NULL_RECORDER,
    ) -> None:
        self.bus = bus
        self.mirror = mirror
        self.limits = limits or SteerLimits()
        self.metrics = metrics

    def steer(self, session_id: str) -> Response:
        """The Flask view (used when the fast path declines a request, e.g. a chunked body)."""
        status, body = self.answer(session_id, json_body, request.headers.get("traceparent"))
        return json_response(body, status)

    def answer(
        self, session_id: str, read_body: Callable[[], bytes], caller_trace: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """(status, body) of an accepted or duplicate steer; any refusal raises ApiError.
        `caller_trace`: the request's W3C `traceparent` header, continued when tracing is on."""
        if self.bus is None:
            raise ApiError(503, "no_steer_channel", NO_STEER_CHANNEL)
        if not is_session_id(session_id):
            raise session_not_found()  # never reaches Redis key building
        body = parse_steer(read_body())
        started = time.perf_counter()
        try:
            span = tracing.span(
                STEER_SPAN, {"worktrain.session_id": session_id}, server=True, parent=caller_trace
            )
            with span:
                self.limits.check_text(body.text)
                result = self.bus.accept(
                    session_id,
                    body.text,
                    body.expectedTurnId,
                    body.clientMsgId,
                    body.mode,
                    max_pending=self.limits.max_pending,
                    traceparent=tracing.traceparent(),
                )
                answer = self._outcome(session_id, body, result)
        except ApiError as exc:
            if exc.code in OUTCOME_OF_CODE:
                self.metrics.count(STEERS, outcome=OUTCOME_OF_CODE[exc.code])
            raise
        self.metrics.count(STEERS, outcome=result.outcome.value)
        if result.outcome is SteerOutcome.ACCEPTED:
            self.metrics.observe(STEER_ACCEPT, time.perf_counter() - started)
        return answer

    def _outcome(self, session_id: str, body: SteerBody, result: AcceptResult) -> tuple[int, dict[str, Any]]:
        outcome = result.outcome
        if outcome is SteerOutcome.ACCEPTED or outcome is SteerOutcome.DUPLICATE:
            assert result.ref is not None
            ref = result.ref
            if outcome is SteerOutcome.ACCEPTED and self.mirror is not None:
                assert result.accepted_at is not None  # set for every ACCEPTED
                self.mirror.submit(
                    SteerAccepted(
                        sessionId=session_id,
                        turnId=ref.turnId,
                        offset=ref.offset,
                        clientMsgId=ref.clientMsgId,
                        ts=result.accepted_at,
                        mode="interrupt" if body.mode == "interrupt" else None,
                    )
                )
            steer: dict[str, Any] = {
                "turnId": ref.turnId,
                "offset": ref.offset,
                "clientMsgId": ref.clientMsgId,
            }
            if body.mode == "interrupt":
                steer["mode"] = body.mode
            return 200, {"success": True, "status": outcome.value, "steer": steer}
        if outcome is SteerOutcome.NOT_FOUND:
            assert self.bus is not None
            raise gone(self.bus, session_id)  # 404: unknown, or finished (with its status)
        if outcome is SteerOutcome.NO_LIVE_TURN:
            raise ApiError(409, "no_live_turn", "expectedTurnId given, but the session has no live turn.")
        if outcome is SteerOutcome.STALE_TURN:
            raise ApiError(
                409,
                "stale_turn",
                "expectedTurnId differs from the session's live turn.",
                {"expectedTurnId": body.expectedTurnId, "currentTurnId": result.current_turn_id},
            )
        if outcome is SteerOutcome.TOO_MANY_PENDING_STEERS:
            raise ApiError(
                429,
                "too_many_pending_steers",
                f"The session already has {self.limits.max_pending} steers waiting for delivery; "
                "retry after its next turn end.",
                headers={"Retry-After": PENDING_RETRY_AFTER_SECONDS},
            )
        raise ApiError(
            422, "client_msg_id_reuse", "clientMsgId was already used for this session with another text."
        )
