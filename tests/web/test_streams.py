"""Pages of wt:events / wt:issues, and a session's events as Server-Sent Events."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from daemon.bus.streams.eventsink import EventSink
from daemon.bus.streams.reads import valid_stream_id
from daemon.schema.events import SessionCompleted, TurnStarted
from daemon.schema.records import SessionStatus
from tests.web.conftest import Web, error_of
from web import readers
from web.errors import ApiError
from web.readers import RedisReader, decode_entry

pytestmark = pytest.mark.unit


def add_issue(web: Web, sid: str, summary: str) -> str:
    issue = {
        "sessionId": sid,
        "kind": "blocked",
        "severity": "warn",
        "summary": summary,
        "turnId": 1,
        "ts": "t",
    }
    # As daemon.bus.streams.issues.IssueSink writes it: the JSON, and the session id as its own field.
    return str(web.client.xadd(web.keys.issues, {"data": json.dumps(issue), "sessionId": sid}))


def test_events_page_and_next_cursor(web: Web) -> None:
    ids = [web.dispatch().get_json()["data"]["sessionId"] for _ in range(3)]
    first = web.http.get("/api/v2/events?limit=2").get_json()["data"]
    assert [e["sessionId"] for e in first["events"]] == ids[:2]
    assert all(e["kind"] == "session_queued" and e["id"] for e in first["events"])
    assert first["next"] == first["events"][-1]["id"]
    rest = web.http.get(f"/api/v2/events?since={first['next']}").get_json()["data"]
    assert [e["sessionId"] for e in rest["events"]] == ids[2:]
    empty = web.http.get(f"/api/v2/events?since={rest['next']}").get_json()["data"]
    assert empty == {"events": [], "next": rest["next"]}


def test_events_of_one_session(web: Web) -> None:
    a = web.dispatch().get_json()["data"]["sessionId"]
    web.dispatch()
    web.steer(a, {"text": "x"})
    events = web.http.get(f"/api/v2/events?sessionId={a}").get_json()["data"]["events"]
    assert [e["kind"] for e in events] == ["session_queued", "steer_accepted"]


def test_issues_page_all_and_by_session(web: Web) -> None:
    a, b = web.new_session(), web.new_session()
    for i in range(3):
        add_issue(web, a, f"a{i}")
        add_issue(web, b, f"b{i}")
    everything = web.http.get("/api/v2/issues").get_json()["data"]
    assert [i["summary"] for i in everything["issues"]] == ["a0", "b0", "a1", "b1", "a2", "b2"]
    page = web.http.get(f"/api/v2/issues?sessionId={b}&limit=2").get_json()["data"]
    assert [i["summary"] for i in page["issues"]] == ["b0", "b1"]
    rest = web.http.get(f"/api/v2/issues?sessionId={b}&since={page['next']}").get_json()["data"]
    assert [i["summary"] for i in rest["issues"]] == ["b2"]


def test_bad_cursors_and_ids_are_400(web: Web) -> None:
    for query in ("since=abc", "since=1-2-3", "since=-1", "limit=nope", "sessionId=bogus"):
        assert error_of(web.http.get(f"/api/v2/issues?{query}")) == (400, "invalid_request"), query
        assert error_of(web.http.get(f"/api/v2/events?{query}")) == (400, "invalid_request"), query


def sse_messages(chunks: Iterator[bytes]) -> Iterator[dict[str, str]]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            fields = dict(line.split(": ", 1) for line in block.decode().splitlines() if ": " in line)
            if "data" in fields:
                yield fields


def finish_with_event(web: Web, sid: str) -> None:
    channel = web.bus.channel(sid, "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")
    EventSink(web.client, web.keys, None).emit(
        SessionCompleted(sessionId=sid, status="completed", outcome="workflow_complete")
    )


def test_sse_replays_from_the_start_and_ends_after_session_completed(real_web: Web) -> None:
    web = real_web
    sid = web.dispatch().get_json()["data"]["sessionId"]
    web.steer(sid, {"text": "hi"})
    finish_with_event(web, sid)
    response = web.http.get(f"/api/v2/sessions/{sid}/events")
    assert response.mimetype == "text/event-stream"
    messages = list(sse_messages(response.response))  # ends by itself
    assert [m["event"] for m in messages] == ["session_queued", "steer_accepted", "session_completed"]
    ids = [e[0] for e in web.client.xrange(web.keys.session(sid).events)]
    assert [m["id"] for m in messages] == ids
    assert json.loads(messages[1]["data"])["offset"] == 1


def test_sse_follows_a_live_session_and_resumes_from_last_event_id(real_web: Web) -> None:
    web = real_web
    sid = web.dispatch().get_json()["data"]["sessionId"]
    first_read = threading.Event()

    def drive() -> None:
        first_read.wait(10)
        EventSink(web.client, web.keys, None).emit(TurnStarted(sessionId=sid, turnId=1))
        finish_with_event(web, sid)

    driver = threading.Thread(target=drive)
    driver.start()
    seen = []
    for message in sse_messages(web.http.get(f"/api/v2/sessions/{sid}/events").response):
        seen.append(message)
        first_read.set()
    driver.join()
    assert [m["event"] for m in seen] == ["session_queued", "turn_started", "session_completed"]
    resumed = web.http.get(f"/api/v2/sessions/{sid}/events", headers={"Last-Event-ID": seen[0]["id"]})
    assert [m["event"] for m in sse_messages(resumed.response)] == ["turn_started", "session_completed"]


def test_sse_ends_for_a_finished_session_without_a_final_event(real_web: Web) -> None:
    web = real_web
    sid = web.new_session()
    channel = web.bus.channel(sid, "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.FAILED, "error")  # no session_completed was ever emitted
    assert list(sse_messages(web.http.get(f"/api/v2/sessions/{sid}/events").response)) == []


def test_sse_bad_last_event_id_is_400(real_web: Web) -> None:
    sid = real_web.new_session()
    response = real_web.http.get(f"/api/v2/sessions/{sid}/events", headers={"Last-Event-ID": "1-x"})
    assert error_of(response) == (400, "invalid_request")


# --- stream ids Redis refuses (web/readers.valid_stream_id) -----------------------------------

MAX_ID_PART = 2**64 - 1
# Each passes `\d{1,20}(-\d{1,20})?` and each makes Redis answer "Invalid stream ID" (or, for
# the largest id as an exclusive start, "invalid start ID for the interval").
REDIS_REFUSES = [
    "99999999999999999999",
    f"{MAX_ID_PART + 1}",
    f"0-{MAX_ID_PART + 1}",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: a Unicode `\d`
    "1-\u0663",
    f"{MAX_ID_PART}-{MAX_ID_PART}",
]


@pytest.mark.parametrize("since", REDIS_REFUSES)
def test_stream_ids_redis_refuses_are_400(web: Web, since: str) -> None:
    sid = web.dispatch().get_json()["data"]["sessionId"]
    add_issue(web, sid, "x")
    for route in ("events", "issues"):
        for extra in ({}, {"sessionId": sid}):
            response = web.http.get(f"/api/v2/{route}", query_string={"since": since, **extra})
            assert error_of(response) == (400, "invalid_request"), (route, extra)


@pytest.mark.parametrize(
    "since", [f"{MAX_ID_PART}", f"{MAX_ID_PART}-{MAX_ID_PART - 1}", f"0-{MAX_ID_PART}", "007", "0-0"]
)
def test_the_extreme_ids_redis_accepts_are_fine(real_web: Web, since: str) -> None:
    sid = real_web.dispatch().get_json()["data"]["sessionId"]
    add_issue(real_web, sid, "x")
    for route in ("events", "issues"):
        for extra in ({}, {"sessionId": sid}):
            response = real_web.http.get(f"/api/v2/{route}", query_string={"since": since, **extra})
            assert response.status_code == 200, (route, extra, response.get_json())


def test_valid_stream_id() -> None:
    for good in ("0", "0-0", "1-2", "007", f"{MAX_ID_PART}", f"{MAX_ID_PART}-{MAX_ID_PART - 1}"):
        assert valid_stream_id(good), good
    for bad in (*REDIS_REFUSES, "", "-", "+", "$", "1-", "-1", "1-2-3", " 1", "1\n", "1" * 21, "+1"):
        assert not valid_stream_id(bad), bad


@pytest.mark.parametrize("route", ["events", "issues"])
def test_the_reader_answers_400_for_an_id_redis_refuses(real_web: Web, route: str) -> None:
    # The backstop behind the route's own check: XRANGE's "Invalid stream ID" is a bad request.
    reader = RedisReader(real_web.client, real_web.keys)
    read = reader.events_page if route == "events" else reader.issues_page
    for session_id in (None, real_web.new_session()):
        with pytest.raises(ApiError) as caught:
            read(session_id, "99999999999999999999", 10)
        assert (caught.value.status, caught.value.code) == (400, "invalid_request")


def test_a_wrong_type_key_is_not_a_bad_request(real_web: Web) -> None:
    # Only id errors are the caller's fault; a key of the wrong type is the server's.
    real_web.client.set(real_web.keys.events, "not a stream")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        RedisReader(real_web.client, real_web.keys).events_page(None, "", 10)


@pytest.mark.parametrize("after", [i for i in REDIS_REFUSES if not i.startswith(f"{MAX_ID_PART}-")])
def test_sse_ids_redis_refuses_are_400(real_web: Web, after: str) -> None:
    sid = real_web.new_session()
    response = real_web.http.get(f"/api/v2/sessions/{sid}/events", query_string={"since": after})
    assert error_of(response) == (400, "invalid_request")
    if after.isascii():  # a header value as a WSGI server hands it over: latin-1 text
        response = real_web.http.get(f"/api/v2/sessions/{sid}/events", headers={"Last-Event-ID": after})
        assert error_of(response) == (400, "invalid_request")


def test_sse_ends_cleanly_when_redis_refuses_the_read(
    real_web: Web, caplog: pytest.LogCaptureFixture
) -> None:
    web = real_web
    sid = web.new_session()
    events_key = web.keys.session(sid).events
    web.client.delete(events_key)
    web.client.set(events_key, "not a stream")  # XREAD answers WRONGTYPE once the answer has started
    response = web.http.get(f"/api/v2/sessions/{sid}/events")
    assert response.status_code == 200
    with caplog.at_level(logging.WARNING, logger="web.streams"):
        body = b"".join(response.response)  # ends, raises nothing
    assert body == b"retry: 2000\n\n"
    assert any("WRONGTYPE" in r.getMessage() for r in caplog.records if r.name == "web.streams")


def test_issues_of_one_session_decode_only_that_sessions_entries(
    web: Web, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = web.new_session(), web.new_session()
    for i in range(3):
        add_issue(web, a, f"a{i}")
        add_issue(web, b, f"b{i}")
    decoded: list[str] = []

    def counting(entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
        decoded.append(entry_id)
        return decode_entry(entry_id, fields)

    monkeypatch.setattr(readers, "decode_entry", counting)
    page = web.http.get(f"/api/v2/issues?sessionId={b}").get_json()["data"]
    assert [i["summary"] for i in page["issues"]] == ["b0", "b1", "b2"]
    assert decoded == [i["id"] for i in page["issues"]]  # a's entries were never parsed
