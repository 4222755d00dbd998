"""Dispatch with an `Idempotency-Key` (README's HTTP API): a retry whose first answer was lost
answers the first session, never a second one."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from rq import Queue
from werkzeug.test import TestResponse

from daemon.bus.keys import QUEUE_NAME
from tests.web.conftest import Web, bytes_client, error_of

pytestmark = pytest.mark.unit

BODY = {
    "workflowId": "two-step",
    "goal": "look around",
    "workspacePath": "/tmp/ws",
    "context": {"a": 1, "b": 2},
}


def dispatch(web: Web, key: str | None, body: dict[str, Any] = BODY) -> TestResponse:
    headers = {} if key is None else {"Idempotency-Key": key}
    return web.http.post("/api/v2/auto/dispatch", json=body, headers=headers)


def sessions(web: Web) -> list[str]:
    return [record.sessionId for record in web.registry.list_sessions()[0]]


def test_a_repeat_with_the_same_key_and_body_answers_the_first_session(web: Web) -> None:
    first = dispatch(web, "order-17:try")
    assert first.status_code == 202 and "duplicate" not in first.get_json()["data"]
    sid = first.get_json()["data"]["sessionId"]
    reordered = {**BODY, "context": {"b": 2, "a": 1}}  # the same body, its keys in another order
    again = dispatch(web, "order-17:try", reordered)
    assert again.status_code == 202
    assert again.get_json() == {
        "success": True,
        "data": {"sessionId": sid, "status": "queued", "workflowId": "two-step", "duplicate": True},
    }
    assert sessions(web) == [sid]
    ttl = web.client.ttl(web.keys.dispatch_key("order-17:try"))
    assert 0 < ttl <= web.bus.retention_seconds  # the key lives for the retention period


def test_the_repeat_reports_the_sessions_status_now(web: Web) -> None:
    sid = dispatch(web, "k1").get_json()["data"]["sessionId"]
    web.bus.channel(sid, "w1", 30).claim()
    assert dispatch(web, "k1").get_json()["data"]["status"] == "running"


def test_the_same_key_with_another_body_is_refused(web: Web) -> None:
    dispatch(web, "k1")
    assert error_of(dispatch(web, "k1", {**BODY, "goal": "something else"})) == (422, "idempotency_key_reuse")
    assert len(sessions(web)) == 1


def test_without_a_key_every_dispatch_is_a_new_session(web: Web) -> None:
    dispatch(web, None)
    dispatch(web, None)
    assert len(sessions(web)) == 2


@pytest.mark.parametrize("key", ["", "x" * 129, "has space", "brace{d}", "é"])
def test_a_malformed_key_is_a_400_and_registers_nothing(web: Web, key: str) -> None:
    response = dispatch(web, key)
    assert error_of(response) == (400, "invalid_request")
    assert "Idempotency-Key" in response.get_json()["error"]
    assert sessions(web) == []


def test_concurrent_dispatches_with_one_key_create_one_session(real_web: Web) -> None:
    answers: list[str] = []
    barrier = threading.Barrier(8)

    def post() -> None:
        client = real_web.app.test_client()
        barrier.wait()
        response = client.post("/api/v2/auto/dispatch", json=BODY, headers={"Idempotency-Key": "race"})
        assert response.status_code == 202, response.get_json()
        answers.append(response.get_json()["data"]["sessionId"])

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8 and len(set(answers)) == 1, answers
    assert sessions(real_web) == answers[:1]
    assert list(Queue(QUEUE_NAME, connection=bytes_client(real_web.client)).job_ids) == answers[:1]


def jobs_of(web: Web) -> Any:
    return web.app.view_functions["dispatch"].__self__.jobs


def test_redis_unreachable_is_a_503(web: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("connection reset")

    monkeypatch.setattr(jobs_of(web), "watching", unreachable)
    assert error_of(dispatch(web, "k1")) == (503, "steer_bus_unavailable")


def test_a_connection_broken_while_watching_is_tried_again(web: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py raises WatchError (not a ConnectionError) when the connection breaks while a
    key is watched; nothing was written, so dispatch tries again instead of answering 500."""
    jobs = jobs_of(web)
    real = jobs.watching
    broken = {"left": 2}

    def broken_get(*_: Any) -> Any:
        raise redis.WatchError("A ConnectionError occurred while watching one or more keys")

    def flaky(key: str) -> Any:
        pipe = real(key)
        if broken["left"]:
            broken["left"] -= 1
            pipe.get = broken_get
        return pipe

    monkeypatch.setattr(jobs, "watching", flaky)
    response = dispatch(web, "k1")
    assert response.status_code == 202 and broken["left"] == 0
    assert sessions(web) == [response.get_json()["data"]["sessionId"]]
