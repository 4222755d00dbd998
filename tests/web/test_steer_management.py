"""Steer management routes (README's Managing steers): one steer, receipts to wait on, retract, edit, the
paged journal, `mode: interrupt` on the steer route."""

from __future__ import annotations

import threading
import time

import pytest

from daemon.schema.records import SessionStatus
from tests.web.conftest import Web, error_of, make_web

pytestmark = pytest.mark.unit

UNKNOWN = "sess_01JD0000000000000000000000"


def steer_url(sid: str, offset: int | str = "") -> str:
    return f"/api/v2/sessions/{sid}/steers" + (f"/{offset}" if offset != "" else "")


def running(web: Web) -> tuple[str, object]:
    sid = web.new_session()
    channel = web.bus.channel(sid, "w1", 30)
    channel.claim()
    channel.start_turn(1)
    return sid, channel


def test_one_steer_by_offset_and_by_client_msg_id(web: Web) -> None:
    sid = web.new_session()
    web.steer(sid, {"text": "first"})
    web.steer(sid, {"text": "second", "clientMsgId": "c-2"})
    body = web.http.get(steer_url(sid, 2)).get_json()
    steer = body["data"]
    assert body["success"] is True
    assert {k: steer[k] for k in ("offset", "state", "text", "clientMsgId", "acceptedTurnId", "mode")} == {
        "offset": 2,
        "state": "pending",
        "text": "second",
        "clientMsgId": "c-2",
        "acceptedTurnId": 0,
        "mode": "queue",
    }
    assert steer["acceptedAt"] and steer["deliveredTurnId"] is None
    assert web.http.get(steer_url(sid), query_string={"clientMsgId": "c-2"}).get_json()["data"] == steer
    assert error_of(web.http.get(steer_url(sid, 3))) == (404, "steer_not_found")
    assert error_of(web.http.get(steer_url(sid), query_string={"clientMsgId": "nope"})) == (
        404,
        "steer_not_found",
    )
    assert error_of(web.http.get(steer_url(sid), query_string={"clientMsgId": "bad id!"})) == (
        400,
        "invalid_request",
    )
    assert error_of(web.http.get(steer_url(UNKNOWN, 1))) == (404, "session_not_found")
    assert error_of(web.http.get(steer_url(UNKNOWN), query_string={"clientMsgId": "c"})) == (
        404,
        "session_not_found",
    )
    assert error_of(web.http.get(steer_url("sess_bad", 1)))[0] == 404


def test_retract_then_retry_then_taken(web: Web) -> None:
    sid, channel = running(web)
    web.steer(sid, {"text": "withdraw me"})
    web.steer(sid, {"text": "keep me"})
    answer = web.http.delete(steer_url(sid, 1))
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["status"], body["steer"]["state"], body["steer"]["text"]) == (
        "retracted",
        "retracted",
        "withdraw me",
    )
    assert web.http.delete(steer_url(sid, 1)).status_code == 200  # a retried DELETE
    channel.turn_ended()  # type: ignore[attr-defined]
    assert error_of(web.http.delete(steer_url(sid, 2))) == (409, "steer_taken")
    assert web.http.delete(steer_url(sid, 2)).get_json()["state"] == "pending"  # taken, not yet delivered
    assert error_of(web.http.delete(steer_url(sid, 9))) == (404, "steer_not_found")
    assert error_of(web.http.delete(steer_url(UNKNOWN, 1))) == (404, "session_not_found")
    web.mirror.flush()
    kinds = [f["data"] for _, f in web.client.xrange(web.keys.events)]
    assert sum('"steer_retracted"' in k for k in kinds) == 1  # the global copy, once


def test_edit_in_place(web: Web) -> None:
    sid, channel = running(web)
    web.steer(sid, {"text": "one"})
    web.steer(sid, {"text": "two", "clientMsgId": "c-2"})
    answer = web.http.patch(steer_url(sid, 2), json={"text": "  TWO  "})
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["status"], body["steer"]["text"], body["steer"]["edits"]) == ("edited", "TWO", 1)
    # the dedup record keeps the first text: a retry of the original is still a duplicate
    retry = web.steer(sid, {"text": "two", "clientMsgId": "c-2"}).get_json()
    assert (retry["status"], retry["steer"]["offset"]) == ("duplicate", 2)
    assert [s.text for s in channel.turn_ended()] == ["one", "TWO"]  # type: ignore[attr-defined]
    assert error_of(web.http.patch(steer_url(sid, 2), json={"text": "late"})) == (409, "steer_taken")
    web.steer(sid, {"text": "three"})
    web.http.delete(steer_url(sid, 3))
    assert error_of(web.http.patch(steer_url(sid, 3), json={"text": "x"})) == (409, "steer_retracted")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"text": ""}, (400, "invalid_request")),
        ({"text": "   "}, (400, "invalid_request")),
        ({"text": 3}, (400, "invalid_request")),
        ({"text": "x", "extra": 1}, (400, "invalid_request")),
        ({"text": "é" * 20000}, (413, "steer_too_large")),
    ],
)
def test_edit_validates_its_body(web: Web, body, expected) -> None:
    sid = web.new_session()
    web.steer(sid, {"text": "one"})
    assert error_of(web.http.patch(steer_url(sid, 1), json=body)) == expected
    assert web.bus.pending(sid)[0].text == "one"


def test_edit_needs_json(web: Web) -> None:
    sid = web.new_session()
    web.steer(sid, {"text": "one"})
    assert error_of(web.http.patch(steer_url(sid, 1), data="text")) == (415, "unsupported_media_type")


def test_the_journal_pages_by_offset(web: Web) -> None:
    sid = web.new_session()
    for n in range(5):
        web.steer(sid, {"text": f"s{n}"})
    web.http.delete(steer_url(sid, 2))
    page = web.http.get(steer_url(sid), query_string={"limit": 2}).get_json()["data"]
    assert [(s["offset"], s["state"]) for s in page["steers"]] == [(1, "pending"), (2, "retracted")]
    rest = web.http.get(steer_url(sid), query_string={"since": page["next"]}).get_json()["data"]
    assert [s["offset"] for s in rest["steers"]] == [3, 4, 5] and rest["next"] == 5
    assert error_of(web.http.get(steer_url(sid), query_string={"since": "x"})) == (400, "invalid_request")


def test_a_wait_returns_on_delivery_with_the_turn(real_web: Web) -> None:
    sid, channel = running(real_web)
    real_web.steer(sid, {"text": "wait for me"})
    answers: list = []
    waiter = threading.Thread(
        target=lambda: answers.append(real_web.http.get(steer_url(sid, 1) + "?wait=30"))
    )
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    steers = channel.turn_ended()  # type: ignore[attr-defined]
    channel.checkpoint(0, ['{"role":"user","content":"x"}'], [s.offset for s in steers], 2)  # type: ignore[attr-defined]
    channel.start_turn(2)  # type: ignore[attr-defined]
    channel.request_sent(2)  # type: ignore[attr-defined]
    waiter.join(timeout=10)
    data = answers[0].get_json()["data"]
    assert (data["state"], data["deliveredTurnId"]) == ("delivered", 2) and data["deliveredAt"]
    assert time.monotonic() - started < 10


def test_a_wait_returns_undelivered_when_the_session_ends(real_web: Web) -> None:
    sid, channel = running(real_web)
    real_web.steer(sid, {"text": "too late", "clientMsgId": "late"})
    answers: list = []
    url = steer_url(sid) + "?clientMsgId=late&wait=30"
    waiter = threading.Thread(target=lambda: answers.append(real_web.http.get(url)))
    waiter.start()
    time.sleep(0.3)
    channel.finish(SessionStatus.FAILED, "incomplete")  # type: ignore[attr-defined]
    waiter.join(timeout=10)
    assert answers[0].get_json()["data"]["state"] == "undelivered"


def test_a_wait_times_out_pending_and_a_settled_steer_answers_at_once(real_web: Web) -> None:
    sid = real_web.new_session()
    real_web.steer(sid, {"text": "nobody takes me"})
    started = time.monotonic()
    data = real_web.http.get(steer_url(sid, 1) + "?wait=0.5").get_json()["data"]
    assert data["state"] == "pending" and time.monotonic() - started >= 0.5
    real_web.http.delete(steer_url(sid, 1))
    started = time.monotonic()
    assert real_web.http.get(steer_url(sid, 1) + "?wait=60").get_json()["data"]["state"] == "retracted"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("wait", ["-1", "abc", "nan", "inf", "1e400"])
def test_a_bad_wait_is_refused(web: Web, wait: str) -> None:
    sid = web.new_session()
    web.steer(sid, {"text": "x"})
    assert error_of(web.http.get(steer_url(sid, 1) + f"?wait={wait}")) == (400, "invalid_request")


def test_concurrent_waits_are_bounded(real_redis, tmp_path) -> None:
    env = make_web(real_redis, tmp_path)
    sid = env.new_session()
    env.steer(sid, {"text": "x"})
    manage = env.app.view_functions["steer_one"].__self__  # the routes object behind the view
    holding = [manage._waits.acquire(blocking=False) for _ in range(manage.max_waits)]
    assert all(holding)
    answer = env.http.get(steer_url(sid, 1) + "?wait=5")
    assert error_of(answer) == (503, "too_many_waits") and answer.headers["Retry-After"] == "1"
    assert env.http.get(steer_url(sid, 1)).status_code == 200  # without wait: served
    for _ in holding:
        manage._waits.release()
    assert env.http.get(steer_url(sid, 1) + "?wait=0.1").status_code == 200


def test_an_interrupt_steer(web: Web) -> None:
    sid, _channel = running(web)
    body = web.steer(sid, {"text": "now", "mode": "interrupt"}).get_json()
    assert body["steer"] == {"turnId": 1, "offset": 1, "clientMsgId": None, "mode": "interrupt"}
    assert web.client.hget(web.keys.session(sid).record, "interruptTurn") == "1"
    assert web.http.get(steer_url(sid, 1)).get_json()["data"]["mode"] == "interrupt"
    assert error_of(web.steer(sid, {"text": "x", "mode": "now"})) == (400, "invalid_request")
    queued = web.steer(sid, {"text": "later"}).get_json()["steer"]
    assert "mode" not in queued


def test_standalone_answers_503(tmp_path) -> None:
    from daemon.workflows import load_catalog
    from tests.web.conftest import FIXTURE_WORKFLOWS, settings_for
    from web.app import create_app
    from web.standalone import JsonlReader

    app = create_app(
        bus=None,
        registry=None,
        enqueue=None,
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(tmp_path),
        event_reader=JsonlReader(tmp_path),
    )
    http = app.test_client()
    for method in ("get", "delete", "patch"):
        answer = getattr(http, method)(steer_url(UNKNOWN, 1), json={"text": "x"})
        assert error_of(answer) == (503, "standalone_unavailable")
