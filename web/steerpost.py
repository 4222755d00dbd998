"""`POST /api/v2/sessions/<sessionId>/steer` (README's HTTP API): the hot path.

The request's checks in their order (web/steerchecks.py: the guard, the id, the body's
size, parsed once by pydantic-core from bytes, the text's size: all before Redis is asked
anything), one EVALSHA (`SteerBus.accept`: rules 1-5 in Redis, atomically, the pending cap
included), serialize the answer. The copy of
`steer_accepted` into the global stream and the JSONL mirror is handed to the background
`EventMirror`, off this path.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from flask import Response, request

from daemon.bus.fleet.metrics import NULL_RECORDER, STEER_ACCEPT, STEERS, MetricsRecorder
from daemon.bus.session.steerbus import AcceptResult, SteerBus, SteerOutcome
from daemon.bus.streams.mirror import EventMirror
from daemon.host import tracing
from daemon.schema.events import SteerAccepted
from web.auth import Guard
from web.errors import ApiError, json_response
from web.finished import gone
from web.models import SteerBody
from web.steerchecks import BEFORE_THE_SPAN, IN_THE_SPAN, SteerLimits, SteerPolicy, SteerRequest, run_checks

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


class SteerRoute:
    """The steer logic, shared by the Flask view and the WSGI fast path (web/fastpath.py)."""

    def __init__(
        self,
        bus: SteerBus | None,
        mirror: EventMirror | None,
        guard: Guard,
        max_body_bytes: int,
        limits: SteerLimits | None = None,
        metrics: MetricsRecorder = NULL_RECORDER,
    ) -> None:
        self.bus = bus
        self.mirror = mirror
        self.limits = limits or SteerLimits()
        self.metrics = metrics
        self.policy = SteerPolicy(guard, bus is not None, max_body_bytes, self.limits)

    def steer(self, session_id: str) -> Response:
        """The Flask view (used when the fast path declines a request, e.g. a chunked body)."""
        status, body = self.answer(session_id, request.environ)
        return json_response(body, status)

    def answer(self, session_id: str, environ: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, body) of an accepted or duplicate steer; any refusal raises ApiError.
        The request's W3C `traceparent` header is continued when tracing is on."""
        checked = SteerRequest(environ, session_id)
        run_checks(BEFORE_THE_SPAN, self.policy, checked)
        assert self.bus is not None and checked.body is not None  # has_channel, body_parsed
        body = checked.body
        started = time.perf_counter()
        try:
            span = tracing.span(
                STEER_SPAN,
                {"worktrain.session_id": session_id},
                server=True,
                parent=environ.get("HTTP_TRACEPARENT"),
            )
            with span:
                run_checks(IN_THE_SPAN, self.policy, checked)
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
