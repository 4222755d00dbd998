"""Dispatch, list, read, cancel and the steer journal (README's HTTP API)."""

from __future__ import annotations

import pytest
import redis

from daemon.bus.jobspec import JOB_FUNCTION, job_queue
from daemon.schema.records import SessionStatus
from tests.web.conftest import Web, bytes_client, error_of

pytestmark = pytest.mark.unit

UNKNOWN = "sess_01JD0000000000000000000000"


def queued_job_ids(client: redis.Redis) -> list[str]:
    return list(job_queue(bytes_client(client)).job_ids)


def test_dispatch_answers_202_and_registers_before_answering(web: Web) -> None:
    response = web.dispatch(context={"ticket": 42})
    assert response.status_code == 202
    body = response.get_json()
    sid = body["data"]["sessionId"]
    assert body == {"success": True, "data": {"sessionId": sid, "status": "queued", "workflowId": "two-step"}}
    record = web.registry.get(sid)
    assert record is not None and record.status is SessionStatus.QUEUED
    assert (record.stepCount, record.stepId, record.context) == (2, "look", {"ticket": 42})
    # steerable at once: no registration gap
    assert web.steer(sid, {"text": "first"}).get_json()["steer"]["offset"] == 1


def test_dispatch_enqueues_exactly_one_rq_job_with_the_session_id(real_web: Web) -> None:
    sid = real_web.dispatch().get_json()["data"]["sessionId"]
    assert queued_job_ids(real_web.client) == [sid]
    job = job_queue(bytes_client(real_web.client)).fetch_job(sid)
    assert job is not None and job.func_name == JOB_FUNCTION and list(job.args) == [sid]  # JSON: a list
    assert job.timeout is not None and job.timeout > 3600


def test_dispatch_emits_session_queued_into_both_streams_and_the_mirror(real_web: Web) -> None:
    sid = real_web.dispatch().get_json()["data"]["sessionId"]
    for key in (real_web.keys.events, real_web.keys.session(sid).events):
        entries = real_web.client.xrange(key)
        assert len(entries) == 1 and '"session_queued"' in entries[0][1]["data"]
    (mirror,) = (real_web.data_dir / "events").glob("*.jsonl")
    assert sid in mirror.read_text()


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"workflowId": None}, "workflowId"),
        ({"goal": None}, "goal"),
        ({"workspacePath": None}, "workspacePath"),
        ({"workflowId": "no-such-workflow"}, "no-such-workflow"),
        ({"workspacePath": "relative/path"}, "absolute"),
        ({"workspacePath": "./x"}, "absolute"),
        ({"workspacePath": ""}, "workspacePath"),
        ({"workflowId": 3}, "workflowId"),
        ({"goal": ["x"]}, "goal"),
        ({"goal": "   "}, "goal"),
        ({"context": "not an object"}, "context"),
        ({"context": [1]}, "context"),
        ({"extra": 1}, "extra"),
    ],
)
def test_dispatch_rejects_bad_bodies(real_web: Web, override: dict[str, object], needle: str) -> None:
    body = {"workflowId": "two-step", "goal": "g", "workspacePath": "/tmp/ws", **override}
    body = {k: v for k, v in body.items() if v is not None}
    response = real_web.http.post("/api/v2/auto/dispatch", json=body)
    assert error_of(response) == (400, "invalid_request")
    assert needle in response.get_json()["error"]
    assert queued_job_ids(real_web.client) == [] and real_web.client.zcard(real_web.keys.sessions) == 0


def test_an_unknown_workflow_names_the_near_matches_and_the_catalog(web: Web) -> None:
    response = web.dispatch(workflowId="two-stpe")
    assert error_of(response) == (400, "invalid_request")
    body = response.get_json()
    assert body["suggestions"] == ["two-step"]
    assert "Did you mean 'two-step'?" in body["error"] and "worktrain workflows" in body["error"]
    far = web.dispatch(workflowId="zzzzzzzz").get_json()
    assert far["suggestions"] == [] and "Did you mean" not in far["error"]


def test_dispatch_does_not_check_workspace_existence(web: Web) -> None:
    # a path inside the default roots (the worker user's home and /tmp) that does not exist
    assert web.dispatch(workspacePath="/tmp/no/such/dir/on/this/host").status_code == 202


def test_list_sessions_newest_first_with_status_filter(web: Web) -> None:
    ids = [web.dispatch().get_json()["data"]["sessionId"] for _ in range(3)]
    web.http.post(f"/api/v2/sessions/{ids[1]}/cancel")
    data = web.http.get("/api/v2/sessions").get_json()["data"]
    assert [s["sessionId"] for s in data["sessions"]] == ids[::-1] and data["totalCount"] == 3
    data = web.http.get("/api/v2/sessions?status=queued").get_json()["data"]
    assert [s["sessionId"] for s in data["sessions"]] == [ids[2], ids[0]] and data["totalCount"] == 2
    data = web.http.get("/api/v2/sessions?status=cancelled&limit=5").get_json()["data"]
    assert [s["sessionId"] for s in data["sessions"]] == [ids[1]]
    assert web.http.get("/api/v2/sessions?limit=1").get_json()["data"]["totalCount"] == 3


@pytest.mark.parametrize("query", ["status=bogus", "limit=0", "limit=-1", "limit=abc", "offset=x", "limit=²"])
def test_list_sessions_bad_query(web: Web, query: str) -> None:
    assert error_of(web.http.get(f"/api/v2/sessions?{query}")) == (400, "invalid_request")


def test_get_session_has_every_field_of_the_spec(web: Web) -> None:
    sid = web.dispatch().get_json()["data"]["sessionId"]
    web.steer(sid, {"text": "pending one"})
    data = web.http.get(f"/api/v2/sessions/{sid}").get_json()["data"]
    spec_fields = {
        "sessionId", "workflowId", "goal", "workspacePath", "status", "turnId", "turnCount", "stepId",
        "stepIndex", "stepCount", "pendingSteers", "steerOffset", "createdAt", "startedAt", "endedAt",
        "outcome", "worker",
    }  # fmt: skip
    assert spec_fields <= set(data)
    assert (data["status"], data["turnId"], data["pendingSteers"], data["steerOffset"]) == ("queued", 0, 1, 1)
    assert data["createdAt"].endswith("Z") and "T" in data["createdAt"]


@pytest.mark.parametrize("sid", [UNKNOWN, "bogus", "sess_x"])
@pytest.mark.parametrize("suffix", ["", "/steers", "/events"])
def test_unknown_session_reads_are_404(web: Web, sid: str, suffix: str) -> None:
    assert error_of(web.http.get(f"/api/v2/sessions/{sid}{suffix}")) == (404, "session_not_found")


def test_cancel_queued_session_ends_it_inline(real_web: Web) -> None:
    web = real_web
    sid = web.dispatch().get_json()["data"]["sessionId"]
    web.steer(sid, {"text": "never delivered"})
    response = web.http.post(f"/api/v2/sessions/{sid}/cancel")
    assert response.status_code == 202
    assert response.get_json()["data"] == {"sessionId": sid, "status": "cancelled"}
    record = web.registry.get(sid)
    assert record is not None and record.status is SessionStatus.CANCELLED and record.outcome == "cancelled"
    assert web.registry.client.zscore(web.registry.keys.active, sid) is None
    kinds = [e[1]["data"] for e in web.client.xrange(web.keys.session(sid).events)]
    assert '"steer_undelivered"' in kinds[-2] and '"session_completed"' in kinds[-1]
    steers = web.http.get(f"/api/v2/sessions/{sid}/steers").get_json()["data"]["steers"]
    assert [s["state"] for s in steers] == ["undelivered"]


def test_cancel_running_session_is_requested(web: Web) -> None:
    sid = web.new_session()
    web.bus.channel(sid, "w1", 30).claim()
    response = web.http.post(f"/api/v2/sessions/{sid}/cancel")
    assert response.status_code == 202 and response.get_json()["data"]["status"] == "cancel_requested"
    assert web.registry.get(sid).cancelRequested  # type: ignore[union-attr]


def test_cancel_finished_is_409_and_unknown_is_404(web: Web) -> None:
    sid = web.new_session()
    web.http.post(f"/api/v2/sessions/{sid}/cancel")
    assert error_of(web.http.post(f"/api/v2/sessions/{sid}/cancel")) == (409, "session_finished")
    assert error_of(web.http.post(f"/api/v2/sessions/{UNKNOWN}/cancel")) == (404, "session_not_found")
    assert error_of(web.http.post("/api/v2/sessions/nope/cancel")) == (404, "session_not_found")


def test_steers_journal_shows_delivery_state(web: Web) -> None:
    sid = web.new_session()
    channel = web.bus.channel(sid, "w1", 30)
    channel.claim()
    channel.checkpoint(0, ["{}"], [], 1)
    turn = channel.start_turn().turn
    web.steer(sid, {"text": "a", "clientMsgId": "ca"})
    channel.turn_ended()
    channel.checkpoint(1, ["{}"], [1], turn + 1)
    channel.start_turn(turn + 1)
    channel.request_sent(turn + 1)  # the turn whose request carries it leaves: delivered
    web.steer(sid, {"text": "b"})
    steers = web.http.get(f"/api/v2/sessions/{sid}/steers").get_json()["data"]["steers"]
    assert [(s["offset"], s["text"], s["state"], s["deliveredTurnId"]) for s in steers] == [
        (1, "a", "delivered", turn + 1),
        (2, "b", "pending", None),
    ]


def test_workflows_lists_the_catalog(web: Web) -> None:
    data = web.http.get("/api/v2/workflows").get_json()["data"]
    two = next(w for w in data["workflows"] if w["id"] == "two-step")
    assert two["stepCount"] == 2 and [s["id"] for s in two["steps"]] == ["look", "write"]
