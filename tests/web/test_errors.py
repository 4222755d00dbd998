"""Every answer is JSON with `success`; errors have `code` and `error`; never HTML, never a 500 from input."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from daemon.bus.keys import Keys
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.host.embedded_redis import free_port
from daemon.host.redisconn import connect
from daemon.workflows import load_catalog
from tests.web.conftest import FIXTURE_WORKFLOWS, Web, error_of, settings_for
from web.app import create_app
from web.jobs import RqJobQueue
from web.readers import RedisReader

pytestmark = pytest.mark.unit

UNKNOWN = "sess_01JD0000000000000000000000"


def test_unknown_route(web: Web) -> None:
    response = web.http.get("/api/v2/nope")
    assert error_of(response) == (404, "not_found") and response.mimetype == "application/json"
    assert error_of(web.http.get("/nope")) == (404, "not_found")  # (`/` is the console: web/console)


def test_wrong_method_keeps_allow_header(web: Web) -> None:
    response = web.http.get(f"/api/v2/sessions/{UNKNOWN}/steer")
    assert error_of(response) == (405, "method_not_allowed")
    assert "POST" in response.headers["Allow"]
    assert error_of(web.http.delete("/api/v2/sessions")) == (405, "method_not_allowed")
    assert error_of(web.http.options("/api/v2/sessions")) == (405, "method_not_allowed")


def test_body_over_one_mib_is_413(web: Web) -> None:
    sid = web.new_session()
    big = b'{"text": "' + b"x" * (1024 * 1024) + b'"}'
    response = web.http.post(f"/api/v2/sessions/{sid}/steer", data=big, content_type="application/json")
    assert error_of(response) == (413, "payload_too_large")
    assert web.bus.pending(sid) == []


def test_body_just_under_the_limit_is_read_and_its_text_capped(web: Web) -> None:
    sid = web.new_session()
    body = b'{"text": "' + b"x" * (1024 * 1024 - 20) + b'"}'
    response = web.http.post(f"/api/v2/sessions/{sid}/steer", data=body, content_type="application/json")
    assert error_of(response) == (413, "steer_too_large")  # read whole, refused by WORKTRAIN_MAX_STEER_BYTES


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_non_json_content_type_is_415(web: Web, content_type: str | None) -> None:
    sid = web.new_session()
    headers = {"Content-Type": content_type} if content_type else {}
    response = web.http.post(f"/api/v2/sessions/{sid}/steer", data=b'{"text":"x"}', headers=headers)
    assert error_of(response) == (415, "unsupported_media_type")


@pytest.mark.parametrize(
    "body", [b"", b"{", b"not json", b"\xff\xfe", b"[1,2]", b'"text"', b"null", b"1e999999"]
)
def test_non_json_or_non_object_body_is_400(web: Web, body: bytes) -> None:
    sid = web.new_session()
    response = web.http.post(f"/api/v2/sessions/{sid}/steer", data=body, content_type="application/json")
    assert error_of(response) == (400, "invalid_request")


def test_deeply_nested_json_is_400_not_500(web: Web) -> None:
    sid = web.new_session()
    body = b'{"text":"x","context":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = web.http.post(f"/api/v2/sessions/{sid}/steer", data=body, content_type="application/json")
    assert error_of(response) == (400, "invalid_request")
    response = web.http.post("/api/v2/auto/dispatch", data=body, content_type="application/json")
    assert error_of(response) == (400, "invalid_request")


def dead_redis_app(tmp_path: Path):  # type: ignore[no-untyped-def]
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    client = connect(url, socket_timeout=0.5)
    keys = Keys("wt")
    return create_app(
        bus=SteerBus(client, keys),
        registry=SessionRegistry(client, keys),
        enqueue=RqJobQueue(connect(url, decode=False, socket_timeout=0.5)),
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(tmp_path),
        event_reader=RedisReader(client, keys),
    ).test_client()


@pytest.mark.redis
def test_redis_unreachable_is_503_with_retry_after(tmp_path: Path) -> None:
    http = dead_redis_app(tmp_path)
    for response in (
        http.post(f"/api/v2/sessions/{UNKNOWN}/steer", json={"text": "x"}),
        http.get("/api/v2/sessions"),
        http.get(f"/api/v2/sessions/{UNKNOWN}"),
        http.post(
            "/api/v2/auto/dispatch", json={"workflowId": "two-step", "goal": "g", "workspacePath": "/tmp/x"}
        ),
        http.get("/api/v2/events"),
    ):
        assert error_of(response) == (503, "steer_bus_unavailable")
        assert response.headers["Retry-After"] == "1"


def test_readyz_and_healthz(tmp_path: Path, real_web: Web) -> None:
    http = dead_redis_app(tmp_path)
    assert http.get("/healthz").get_json() == {"success": True, "status": "ok"}
    not_ready = http.get("/readyz")
    assert error_of(not_ready) == (503, "not_ready")
    assert real_web.http.get("/readyz").get_json() == {"success": True, "status": "ready"}


def test_unexpected_exception_is_logged_500_json(web: Web, caplog: pytest.LogCaptureFixture) -> None:
    def boom() -> None:
        raise RuntimeError("a bug")

    web.app.add_url_rule("/boom", "boom", boom)
    with caplog.at_level(logging.ERROR, logger="web.errors"):
        response = web.http.get("/boom")
    assert error_of(response) == (500, "internal_error") and response.mimetype == "application/json"
    assert "a bug" in caplog.text


def test_an_unknown_route_under_a_valid_session_id_is_not_found(web: Web) -> None:
    sid = web.new_session()
    for suffix in (f"{sid}/nosuchroute", f"{sid}/steer/x", f"{UNKNOWN}/nosuchroute"):
        assert error_of(web.http.get(f"/api/v2/sessions/{suffix}")) == (404, "not_found"), suffix
    response = web.http.post(f"/api/v2/sessions/{sid}/x/steer", json={"text": "x"})
    assert error_of(response) == (404, "not_found")


def test_a_malformed_session_id_with_a_slash_is_session_not_found(web: Web) -> None:
    for suffix in ("sess_..%2F..%2Fx", "a/b", "nope/nosuchroute", f"{UNKNOWN.lower()}/steers/x"):
        assert error_of(web.http.get(f"/api/v2/sessions/{suffix}")) == (404, "session_not_found"), suffix
    response = web.http.post("/api/v2/sessions/a/b/steer", json={"text": "x"})
    assert error_of(response) == (404, "session_not_found")
