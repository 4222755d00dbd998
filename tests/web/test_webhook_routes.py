"""callbackUrl on dispatch and the webhook routes (README's Webhooks): only http(s) URLs are taken, not
on loopback or a private address unless the operator allows it, the record keeps it, the
deliveries are served without their bodies, and a cancel that ends a queued session queues
its session.finished."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

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


NOT_PUBLIC = [
    "http://127.0.0.1:6379/",  # Redis' port
    "http://localhost:3456/api",
    "http://LocalHost./x",
    "http://[::1]/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "http://0.0.0.0:80/",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "https://192.168.1.1/",
    "http://[fd00::1]/",
    "http://[fe80::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:a9fe:a9fe]/",
]


@pytest.mark.parametrize("url", NOT_PUBLIC)
def test_a_callback_url_on_a_non_public_address_is_refused_unless_allowed(
    web: Web, new_web: Callable[..., Web], redis_client: redis.Redis, url: str
) -> None:
    """Issue 40, item 4: the workers were an oracle of their own network."""
    response = web.dispatch(callbackUrl=url)
    assert error_of(response) == (400, "callback_not_allowed"), url
    assert "WORKTRAIN_WEBHOOK_ALLOW_PRIVATE" in response.get_json()["error"]
    allowed = new_web(redis_client, webhook_allow_private=True)
    assert allowed.dispatch(callbackUrl=url).status_code == 202, url


def test_an_allowed_network_lets_only_its_addresses_through(
    new_web: Callable[..., Web], redis_client: redis.Redis
) -> None:
    web = new_web(redis_client, webhook_allow_networks="127.0.0.0/8, 10.0.0.0/8")
    for url in ("http://127.0.0.1:9/", "http://2130706433/", "http://localhost/", "http://10.9.9.9/"):
        assert web.dispatch(callbackUrl=url).status_code == 202, url
    for url in ("http://[::1]/", "http://192.168.0.1/", "http://169.254.169.254/"):
        assert error_of(web.dispatch(callbackUrl=url)) == (400, "callback_not_allowed"), url
    assert (
        web.dispatch(callbackUrl="https://hooks.example.com/x").status_code == 202
    )  # a name: the sender checks


def test_a_cancelled_queued_session_queues_its_session_finished(
    new_web: Callable[..., Any], redis_client: redis.Redis
) -> None:
    web: Web = new_web(redis_client, webhook_allow_networks="127.0.0.1/32")
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
