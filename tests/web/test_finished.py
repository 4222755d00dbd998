"""404 `session_finished` (status and outcome in the body) for the steer, edit, retract and
receipt routes of a session that has ended; an unknown session stays `session_not_found`."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.schema.records import SessionStatus
from tests.web.conftest import Web, error_of

pytestmark = pytest.mark.unit

UNKNOWN = "sess_01JD0000000000000000000000"


def steer_url(sid: str, offset: int | str = "") -> str:
    return f"/api/v2/sessions/{sid}/steers" + (f"/{offset}" if offset != "" else "")


def ended(web: Web, status: SessionStatus = SessionStatus.FAILED, outcome: str = "model_error") -> str:
    """A session that ended with two steers in its journal (offsets 1 and 2)."""
    sid = web.new_session()
    channel = web.bus.channel(sid, "w1", 30)
    channel.claim()
    web.steer(sid, {"text": "taken", "clientMsgId": "c-1"})
    channel.start_turn()
    channel.turn_ended()
    web.steer(sid, {"text": "left over"})
    channel.finish(status, outcome, "the model said no")
    return sid


def finished_body(response: Any, status: str = "failed", outcome: str = "model_error") -> dict[str, Any]:
    assert error_of(response) == (404, "session_finished")
    body: dict[str, Any] = response.get_json()
    assert (body["status"], body["outcome"], body["outcomeDetail"]) == (status, outcome, "the model said no")
    assert body["success"] is False and status in body["error"] and outcome in body["error"]
    return body


def test_a_steer_to_a_finished_session(web: Web) -> None:
    sid = ended(web, SessionStatus.COMPLETED, "workflow_complete")
    finished_body(web.steer(sid, {"text": "too late"}), "completed", "workflow_complete")
    finished_body(web.steer(sid, {"text": "taken", "clientMsgId": "c-1"}), "completed", "workflow_complete")
    assert error_of(web.steer(UNKNOWN, {"text": "x"})) == (404, "session_not_found")


def test_edits_and_retracts_of_a_finished_session(web: Web) -> None:
    sid = ended(web)
    for offset in (1, 2, 9):  # settled, settled, never accepted
        for response in (
            web.http.delete(steer_url(sid, offset)),
            web.http.patch(steer_url(sid, offset), json={"text": "new"}),
        ):
            body = finished_body(response)
            assert body.get("state") == (
                None if offset == 9 else web.http.get(steer_url(sid, offset)).get_json()["data"]["state"]
            )
    assert error_of(web.http.delete(steer_url(UNKNOWN, 1))) == (404, "session_not_found")
    assert error_of(web.http.patch(steer_url(UNKNOWN, 1), json={"text": "x"})) == (404, "session_not_found")


def test_receipts_of_a_finished_session(web: Web) -> None:
    """The steers it had stay readable (their receipts are the record); one it never had
    answers `session_finished`, not a bare `steer_not_found`."""
    sid = ended(web)
    assert web.http.get(steer_url(sid, 1)).get_json()["data"]["state"] != "pending"
    assert web.http.get(steer_url(sid, 2), query_string={"wait": "5"}).get_json()["data"]["state"] == (
        "undelivered"
    )
    finished_body(web.http.get(steer_url(sid, 9)))
    finished_body(web.http.get(steer_url(sid), query_string={"clientMsgId": "never"}))
    assert web.http.get(steer_url(sid), query_string={"clientMsgId": "c-1"}).status_code == 200


def test_a_running_session_keeps_its_codes(web: Web) -> None:
    sid = web.new_session()
    assert error_of(web.http.get(steer_url(sid, 3))) == (404, "steer_not_found")
    assert error_of(web.http.delete(steer_url(sid, 3))) == (404, "steer_not_found")
