"""POST /api/v2/sessions/<id>/steer: one test per row of README's HTTP API's table and per rule of its
order."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.bus.streams.mirror import EventMirror
from daemon.schema.events import SessionCompleted
from daemon.schema.records import SessionStatus
from daemon.workflows import load_catalog
from tests.roundtrips import RoundTrips, counting_client
from tests.web.conftest import FIXTURE_WORKFLOWS, Web, error_of, settings_for
from web.app import create_app
from web.errors import NO_STEER_CHANNEL, SESSION_NOT_FOUND
from web.jobs import RqJobQueue
from web.models import TEXT_REQUIRED
from web.readers import RedisReader

pytestmark = pytest.mark.unit

UNKNOWN = "sess_01JD0000000000000000000000"


def live_turn(web: Web, sid: str) -> int:
    channel = web.bus.channel(sid, "w1", 30)
    channel.claim()
    return channel.start_turn().turn


def finish(web: Web, sid: str) -> None:
    channel = web.bus.channel(sid, "w-fin", 30)
    channel.claim()
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")


# --- the table ---------------------------------------------------------------------------


def test_accepted(web: Web) -> None:
    sid = web.new_session()
    response = web.steer(sid, {"text": "look at the tests first", "clientMsgId": "c-1"})
    assert response.status_code == 200
    assert response.get_json() == {
        "success": True,
        "status": "accepted",
        "steer": {"turnId": 0, "offset": 1, "clientMsgId": "c-1"},
    }
    assert response.mimetype == "application/json"


def test_accepted_without_client_msg_id_has_null(web: Web) -> None:
    sid = web.new_session()
    assert web.steer(sid, {"text": "x"}).get_json()["steer"] == {
        "turnId": 0,
        "offset": 1,
        "clientMsgId": None,
    }


def test_duplicate_returns_the_first_ref(web: Web) -> None:
    sid = web.new_session()
    first = web.steer(sid, {"text": "same", "clientMsgId": "m"}).get_json()["steer"]
    web.steer(sid, {"text": "another"})
    again = web.steer(sid, {"text": "same", "clientMsgId": "m"})
    assert again.status_code == 200
    assert again.get_json() == {"success": True, "status": "duplicate", "steer": first}
    assert [s.offset for s in web.bus.pending(sid)] == [1, 2]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"text": None},
        {"text": 5},
        {"text": ["a"]},
        {"text": ""},
        {"text": "   \n\t "},
        {"expectedTurnId": 1},
    ],
)
def test_text_missing_not_a_string_or_blank(web: Web, body: dict[str, object]) -> None:
    response = web.steer(web.new_session(), body)
    assert error_of(response) == (400, "invalid_request")
    assert response.get_json()["error"] == TEXT_REQUIRED


@pytest.mark.parametrize(
    "body",
    [
        {"text": "x", "expectedTurnId": True},
        {"text": "x", "expectedTurnId": -1},
        {"text": "x", "expectedTurnId": 1.5},
        {"text": "x", "expectedTurnId": 1.0},
        {"text": "x", "expectedTurnId": "1"},
        {"text": "x", "expectedTurnId": 10**30},
        {"text": "x", "clientMsgId": ""},
        {"text": "x", "clientMsgId": "a" * 129},
        {"text": "x", "clientMsgId": "has space"},
        {"text": "x", "clientMsgId": "é"},
        {"text": "x", "clientMsgId": "a\n"},
        {"text": "x", "clientMsgId": 7},
        {"text": "x", "expectedTurnID": 1},
    ],
)
def test_other_invalid_field(web: Web, body: dict[str, object]) -> None:
    sid = web.new_session()
    response = web.steer(sid, body)
    assert error_of(response) == (400, "invalid_request")
    assert response.get_json()["error"] != TEXT_REQUIRED
    assert web.bus.pending(sid) == []


def test_client_msg_id_limits_are_inclusive(web: Web) -> None:
    sid = web.new_session()
    for cid in ("a", "A.b_c:d-9", "x" * 128):
        assert web.steer(sid, {"text": "t", "clientMsgId": cid}).status_code == 200


def test_null_optional_fields_mean_not_given(web: Web) -> None:
    sid = web.new_session()
    response = web.steer(sid, {"text": "x", "expectedTurnId": None, "clientMsgId": None})
    assert response.get_json()["status"] == "accepted"


@pytest.mark.parametrize(
    "sid", [UNKNOWN, "sess_", "nope", "sess_01jd0000000000000000000000", "SESS_01JD0000000000000000000000"]
)
def test_unknown_or_malformed_session(web: Web, sid: str) -> None:
    response = web.steer(sid, {"text": "x"})
    assert error_of(response) == (404, "session_not_found")
    assert response.get_json()["error"] == SESSION_NOT_FOUND


def test_malformed_id_never_becomes_a_redis_key(web: Web) -> None:
    for sid in ("sess_..%2F..%2Fetc", "sess_{x}", "sess_01JD0000000000000000000000%00", "x" * 5000):
        assert error_of(web.steer(sid, {"text": "x"})) == (404, "session_not_found")
    assert web.client.keys("*") == []


def test_finished_session_is_404_session_finished_with_its_status(web: Web) -> None:
    sid = web.new_session()
    finish(web, sid)
    response = web.steer(sid, {"text": "too late"})
    assert error_of(response) == (404, "session_finished")
    body = response.get_json()
    assert (body["status"], body["outcome"]) == ("completed", "workflow_complete")
    assert "completed" in body["error"] and "workflow_complete" in body["error"]


def test_queued_session_accepts_and_expected_turn_is_no_live_turn(web: Web) -> None:
    sid = web.new_session()
    assert web.steer(sid, {"text": "early"}).get_json()["status"] == "accepted"
    response = web.steer(sid, {"text": "cas", "expectedTurnId": 0})
    assert error_of(response) == (409, "no_live_turn")


def test_stale_turn_names_both_turns(web: Web) -> None:
    sid = web.new_session()
    turn = live_turn(web, sid)
    response = web.steer(sid, {"text": "x", "expectedTurnId": turn + 3})
    assert error_of(response) == (409, "stale_turn")
    body = response.get_json()
    assert (body["expectedTurnId"], body["currentTurnId"]) == (turn + 3, turn)


def test_same_correct_expected_turn_accepts_several(web: Web) -> None:
    sid = web.new_session()
    turn = live_turn(web, sid)
    refs = [web.steer(sid, {"text": f"s{i}", "expectedTurnId": turn}).get_json()["steer"] for i in range(3)]
    assert [(r["turnId"], r["offset"]) for r in refs] == [(turn, 1), (turn, 2), (turn, 3)]


def test_client_msg_id_reuse(web: Web) -> None:
    sid = web.new_session()
    web.steer(sid, {"text": "one", "clientMsgId": "m"})
    response = web.steer(sid, {"text": "two", "clientMsgId": "m"})
    assert error_of(response) == (422, "client_msg_id_reuse")


def test_text_is_trimmed_and_a_whitespace_only_retry_is_a_duplicate(web: Web) -> None:
    # The decision documented in web/models.py: trimmed text is stored and compared.
    sid = web.new_session()
    web.steer(sid, {"text": "  fix the build\n", "clientMsgId": "m"})
    again = web.steer(sid, {"text": "fix the build", "clientMsgId": "m"})
    assert again.get_json()["status"] == "duplicate"
    assert [s.text for s in web.bus.pending(sid)] == ["fix the build"]


def test_no_steer_channel_without_a_bus(tmp_path: Path) -> None:
    app = create_app(
        bus=None,
        registry=None,
        enqueue=None,
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(tmp_path),
        event_reader=RedisReader(None, Keys()),  # type: ignore[arg-type]  # never read here
    )
    response = app.test_client().post(f"/api/v2/sessions/{UNKNOWN}/steer", json={"text": "x"})
    assert error_of(response) == (503, "no_steer_channel")
    assert response.get_json()["error"] == NO_STEER_CHANNEL


# --- the rule order -----------------------------------------------------------------------


def test_rule1_before_rule2_finished_session_with_known_client_msg_id(web: Web) -> None:
    sid = web.new_session()
    web.steer(sid, {"text": "a", "clientMsgId": "m"})
    finish(web, sid)
    assert error_of(web.steer(sid, {"text": "a", "clientMsgId": "m"})) == (404, "session_finished")


def test_rule2_before_rule3_duplicate_and_reuse_win_over_turn_checks(web: Web) -> None:
    sid = web.new_session()
    web.steer(sid, {"text": "a", "clientMsgId": "m"})
    assert (
        web.steer(sid, {"text": "a", "clientMsgId": "m", "expectedTurnId": 7}).get_json()["status"]
        == "duplicate"
    )
    assert error_of(web.steer(sid, {"text": "b", "clientMsgId": "m", "expectedTurnId": 7})) == (
        422,
        "client_msg_id_reuse",
    )


def test_rule3_rejections_consume_no_offset(web: Web) -> None:
    sid = web.new_session()
    turn = live_turn(web, sid)
    web.steer(sid, {"text": "stale", "expectedTurnId": turn + 1})
    assert web.steer(sid, {"text": "ok", "expectedTurnId": turn}).get_json()["steer"]["offset"] == 1


def test_rule4_accept_appends_pending_journal_and_events(real_web: Web) -> None:
    web = real_web
    sid = web.new_session()
    web.steer(sid, {"text": "hello", "clientMsgId": "m"})
    assert [(s.offset, s.text) for s in web.bus.pending(sid)] == [(1, "hello")]
    steers = web.http.get(f"/api/v2/sessions/{sid}/steers").get_json()["data"]["steers"]
    assert [(s["offset"], s["state"], s["clientMsgId"]) for s in steers] == [(1, "pending", "m")]
    assert web.mirror.flush()
    kinds = [e["kind"] for e in web.http.get("/api/v2/events").get_json()["data"]["events"]]
    assert kinds == ["steer_accepted"]
    day_files = list((web.data_dir / "events").glob("*.jsonl"))
    assert len(day_files) == 1 and '"steer_accepted"' in day_files[0].read_text()


def test_validation_happens_before_the_bus_for_unknown_sessions(web: Web) -> None:
    response = web.http.post(f"/api/v2/sessions/{UNKNOWN}/steer", data="{", content_type="application/json")
    assert error_of(response) == (400, "invalid_request")


# --- concurrency and cost ---------------------------------------------------------------


def test_sixteen_threads_over_http_get_contiguous_offsets(
    real_redis: redis.Redis, new_web: Callable[..., Web]
) -> None:
    web = new_web(real_redis, max_pending_steers=1000)
    sid = web.new_session()
    offsets: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def run(worker: int) -> None:
        http = web.app.test_client()
        barrier.wait()
        for i in range(20):
            response = http.post(f"/api/v2/sessions/{sid}/steer", json={"text": f"t{worker}-{i}"})
            with lock:
                offsets.append(response.get_json()["steer"]["offset"])

    threads = [threading.Thread(target=run, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(offsets) == list(range(1, 321))
    assert [s.offset for s in web.bus.pending(sid)] == list(range(1, 321))


def test_racing_client_msg_id_with_different_texts_over_http(real_web: Web) -> None:
    web = real_web
    sid = web.new_session()
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def run(text: str) -> None:
        http = web.app.test_client()
        barrier.wait()
        statuses.append(
            http.post(f"/api/v2/sessions/{sid}/steer", json={"text": text, "clientMsgId": "race"}).status_code
        )

    threads = [threading.Thread(target=run, args=(t,)) for t in ("coordinator A", "coordinator B")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200, 422]
    assert len(web.bus.pending(sid)) == 1


def test_steer_route_is_one_redis_round_trip(redis_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = counting_client(redis_server.url)
    client.flushdb()
    keys = Keys("wt")
    bus = SteerBus(client, keys)
    sid = SessionRegistry(client, keys).create(
        NewSession(workflowId="two-step", goal="g", workspacePath="/tmp")
    )
    app = create_app(
        bus=bus,
        registry=SessionRegistry(client, keys),
        enqueue=RqJobQueue(client),
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(tmp_path),
        event_reader=RedisReader(client, keys),
        mirror=None,
    )
    http = app.test_client()
    http.post(f"/api/v2/sessions/{sid}/steer", json={"text": "warm the script cache"})
    with RoundTrips() as trips:
        response = http.post(f"/api/v2/sessions/{sid}/steer", json={"text": "measured", "clientMsgId": "c"})
    assert response.status_code == 200
    assert trips.count == 1


def test_mirror_writes_do_not_add_round_trips_to_the_route(redis_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import redis as redis_lib

    client = counting_client(redis_server.url)
    client.flushdb()
    keys = Keys("wt")
    mirror_client = redis_lib.Redis.from_url(redis_server.url, decode_responses=True)
    mirror = EventMirror(mirror_client, keys, tmp_path)
    app = create_app(
        bus=SteerBus(client, keys),
        registry=SessionRegistry(client, keys),
        enqueue=RqJobQueue(client),
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(tmp_path),
        event_reader=RedisReader(client, keys),
        mirror=mirror,
    )
    sid = SessionRegistry(client, keys).create(
        NewSession(workflowId="two-step", goal="g", workspacePath="/tmp")
    )
    http = app.test_client()
    http.post(f"/api/v2/sessions/{sid}/steer", json={"text": "warm"})
    with RoundTrips() as trips:
        http.post(f"/api/v2/sessions/{sid}/steer", json={"text": "measured"})
    assert trips.count == 1
    assert mirror.flush()
    assert mirror_client.xlen(keys.events) == 2


def test_session_completed_event_sink_is_unaffected(real_web: Web) -> None:
    # A finished session (as the worker ends it) refuses steers; its events stay readable.
    web = real_web
    sid = web.new_session()
    finish(web, sid)
    EventSink(web.client, web.keys, None).emit(
        SessionCompleted(sessionId=sid, status="completed", outcome="workflow_complete")
    )
    assert error_of(web.steer(sid, {"text": "x"})) == (404, "session_finished")
    assert web.http.get(f"/api/v2/sessions/{sid}").get_json()["data"]["status"] == "completed"
