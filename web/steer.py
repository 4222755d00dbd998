"""`POST /api/v2/sessions/<sessionId>/steer` (SPEC §3.1): the hot path.

Parse and validate the body once (pydantic-core, from bytes), one EVALSHA (`SteerBus.accept`:
rules 1-4 in Redis, atomically), serialize the answer. The copy of `steer_accepted` into the
global stream and the JSONL mirror is handed to the background `EventMirror`, off this path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Response, request

from daemon.bus import AcceptResult, SteerBus, SteerOutcome
from daemon.events import SteerAccepted
from daemon.ids import is_session_id
from web.errors import NO_STEER_CHANNEL, ApiError, json_response, session_not_found
from web.mirror import EventMirror
from web.models import SteerBody, parse_steer

MAX_STEER_BYTES = 32768  # SPEC §3.1's default for WORKTRAIN_MAX_STEER_BYTES (issue 10 makes it a setting)


def steer_too_large(limit: int) -> ApiError:
    return ApiError(
        413, "steer_too_large", f"Steer text is over {limit} bytes of UTF-8 (WORKTRAIN_MAX_STEER_BYTES)."
    )


def unsupported_media() -> ApiError:
    return ApiError(415, "unsupported_media_type", "Content-Type must be application/json.")


def json_body() -> bytes:
    """The raw body of a JSON request (size-capped by MAX_CONTENT_LENGTH: 413 beyond it)."""
    if not request.is_json:
        raise unsupported_media()
    return request.get_data(cache=False)


class SteerRoute:
    """The steer logic, shared by the Flask view and the WSGI fast path (web/fastpath.py)."""

    def __init__(self, bus: SteerBus | None, mirror: EventMirror | None) -> None:
        self.bus = bus
        self.mirror = mirror

    def steer(self, session_id: str) -> Response:
        """The Flask view (used when the fast path declines a request, e.g. a chunked body)."""
        status, body = self.answer(session_id, json_body)
        return json_response(body, status)

    def answer(self, session_id: str, read_body: Callable[[], bytes]) -> tuple[int, dict[str, Any]]:
        """(status, body) of an accepted or duplicate steer; any refusal raises ApiError."""
        if self.bus is None:
            raise ApiError(503, "no_steer_channel", NO_STEER_CHANNEL)
        if not is_session_id(session_id):
            raise session_not_found()  # never reaches Redis key building
        body = parse_steer(read_body())
        result = self.bus.accept(session_id, body.text, body.expectedTurnId, body.clientMsgId, body.mode)
        return self._outcome(session_id, body, result)

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
            steer: dict[str, Any] = {"turnId": ref.turnId, "offset": ref.offset}
            steer["clientMsgId"] = ref.clientMsgId
            if body.mode == "interrupt":
                steer["mode"] = body.mode
            return 200, {"success": True, "status": outcome.value, "steer": steer}
        if outcome is SteerOutcome.NOT_FOUND:
            raise session_not_found()
        if outcome is SteerOutcome.NO_LIVE_TURN:
            raise ApiError(409, "no_live_turn", "expectedTurnId given, but the session has no live turn.")
        if outcome is SteerOutcome.STALE_TURN:
            raise ApiError(
                409,
                "stale_turn",
                "expectedTurnId differs from the session's live turn.",
                {"expectedTurnId": body.expectedTurnId, "currentTurnId": result.current_turn_id},
            )
        raise ApiError(
            422, "client_msg_id_reuse", "clientMsgId was already used for this session with another text."
        )
