"""callbackUrl on dispatch and the webhook routes (README's Webhooks): only http(s) URLs are taken, the
record keeps it, the deliveries are served without their bodies, and a cancel that ends a
queued session queues its session.finished."""

from __future__ import annotations

import json

import pytest

from tests.web.conftest import Web, error_of

pytestmark = pytest.mark.unit


def test_the_callback_url_reaches_the_record_and_the_openapi_document(web: Web) -> None:
    response = web.dispatch(callbackUrl="https://coordinator.example/hooks?team=a")
    assert response.status_code == 202, response.get_json()
    sid = response.get_json()["data"]["sessionId"]
    data = web.http.get(f"/api/v2/sessions/{sid}").get_json()["data"]
    assert data["callbackUrl"] == "https://coordinator.example/hooks?team=a"
    document = web.http.get("/api/v2/openapi.json").get_json()
    assert "callbackUrl" in document["components"]["schemas"]["DispatchBody"]["properties"]
    assert {"/api/v2/webhooks", "/api/v2/sessions/{sessionId}/webhooks"} <= set(document["paths"])


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "gopher://127.0.0.1:6379/_FLUSHALL", "javascript:alert(1)", "http://", "x"]
)
def test_a_callback_url_that_is_not_http_is_refused(web: Web, url: str) -> None:
    response = web.dispatch(callbackUrl=url)
    assert error_of(response) == (400, "invalid_request")
    assert "callbackUrl" in response.get_json()["error"]


def test_a_cancelled_queued_session_queues_its_session_finished(web: Web) -> None:
    sid = web.dispatch(callbackUrl="http://127.0.0.1:9/hook").get_json()["data"]["sessionId"]
    assert web.http.post(f"/api/v2/sessions/{sid}/cancel").status_code == 202
    [delivery] = web.http.get(f"/api/v2/sessions/{sid}/webhooks").get_json()["data"]["deliveries"]
    assert (delivery["type"], delivery["state"], delivery["url"]) == (
        "session.finished",
        "pending",
        "http://127.0.0.1:9/hook",
    )
    assert "body" not in delivery
    listed = web.http.get("/api/v2/webhooks").get_json()["data"]
    assert [d["id"] for d in listed["deliveries"]] == [delivery["id"]] and listed["pending"] == 1
    assert web.http.get("/api/v2/webhooks?failed=true").get_json()["data"]["deliveries"] == []
    stored = json.loads(web.bus.client.hget(web.bus.keys.webhooks.deliveries, delivery["id"]))
    assert json.loads(stored["body"])["status"] == "cancelled"
    assert error_of(web.http.get("/api/v2/sessions/sess_01JD0000000000000000000000/webhooks")) == (
        404, "session_not_found",
    )  # fmt: skip
