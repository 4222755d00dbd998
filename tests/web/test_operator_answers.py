"""What the API answers an operator (issue 45): wrong field names named in the 400, an unknown
model named as a warning at dispatch, a shortened id taken back, the fleet's history."""

from __future__ import annotations

import time

import pytest

from daemon.bus.fleet.history import FleetHistory, FleetSample, minute_of
from tests.web.conftest import Web, error_of

pytestmark = pytest.mark.unit


def test_a_dispatch_with_the_wrong_field_names_is_told_which(web: Web) -> None:
    response = web.http.post(
        "/api/v2/auto/dispatch", json={"workflow": "two-step", "goal": "g", "workspace": "/tmp"}
    )
    assert error_of(response) == (400, "invalid_request")
    said = response.get_json()["error"]
    print(said)
    assert "'workflow' (did you mean 'workflowId'?)" in said
    assert "'workspace' (did you mean 'workspacePath'?)" in said
    assert "workflowId is required" in said  # and what is missing, after


def test_an_unknown_model_is_named_in_the_dispatch_answer(web: Web) -> None:
    body = web.dispatch(agentConfig={"model": "gpt-4o"}).get_json()
    assert body["data"]["status"] == "queued"  # it runs: the API decides whether the model exists
    [warning] = body["data"]["warnings"]
    print(warning)
    assert warning["code"] == "unknown_model" and "'gpt-4o' is not in the price table" in warning["message"]
    known = web.dispatch(agentConfig={"model": "claude-sonnet-4-5-20250929"}).get_json()
    assert "warnings" not in known["data"]


def test_a_shortened_id_is_resolved_and_an_ambiguous_one_lists_the_candidates(web: Web) -> None:
    ids = [web.dispatch().get_json()["data"]["sessionId"] for _ in range(3)]
    tail = ids[1][-12:]
    for given in (tail, f"…{tail}", tail.lower(), ids[1][:-1]):
        found = web.http.get("/api/v2/sessions", query_string={"id": given}).get_json()["data"]
        assert [s["sessionId"] for s in found["sessions"]] == [ids[1]], given
    prefix = web.http.get("/api/v2/sessions?id=sess_0").get_json()["data"]  # every ULID of this age
    assert prefix["totalCount"] == 3
    nothing = web.http.get("/api/v2/sessions?id=ZZZZZZZZ").get_json()["data"]
    assert nothing == {"sessions": [], "totalCount": 0}


@pytest.mark.parametrize("bad", ["ab", "sess_", "hello world", "x" * 40])
def test_what_cannot_be_part_of_an_id_is_a_400(web: Web, bad: str) -> None:
    response = web.http.get("/api/v2/sessions", query_string={"id": bad})
    assert error_of(response) == (400, "invalid_request")


def test_the_fleet_history_route_serves_the_samples_after_since(web: Web) -> None:
    history = FleetHistory(web.client, web.keys)
    minute = minute_of(time.time())  # the route serves the last 24 h
    for t in (minute - 120, minute - 60, minute):
        sample = FleetSample(t=t, workers=1, queueDepth=0, sessions={"running": t % 7}, inFlight=0, cap=0,
                             steersPerMinute=2, p50=0.5, p99=None)  # fmt: skip
        assert history.record(sample)
    data = web.http.get(f"/api/v2/fleet/history?since={minute - 120}").get_json()["data"]
    assert [s["t"] for s in data["samples"]] == [minute - 60, minute]
    assert (data["intervalSeconds"], data["windowSeconds"]) == (60, 86400)
    assert error_of(web.http.get("/api/v2/fleet/history?since=-1")) == (400, "invalid_request")
