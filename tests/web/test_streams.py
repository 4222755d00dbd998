"""Pages of wt:events / wt:issues, and a session's events as Server-Sent Events."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

from daemon.events import EventSink, SessionCompleted, TurnStarted
from daemon.records import SessionStatus
from tests.web.conftest import Web, error_of


def add_issue(web: Web, sid: str, summary: str) -> str:
    issue = {
        "sessionId": sid,
        "kind": "blocked",
        "severity": "warn",
        "summary": summary,
        "turnId": 1,
        "ts": "t",
    }
    return str(web.client.xadd(web.keys.issues, {"data": json.dumps(issue)}))


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
