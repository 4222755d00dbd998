"""The steer fast path (web/fastpath.py) answers exactly as the Flask route does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask

from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.workflows import load_catalog
from tests.web.conftest import FIXTURE_WORKFLOWS, TOKEN, bytes_client, make_web, settings_for
from web.app import create_app
from web.auth import bearer_ok, expected_bearer, is_json_content_type
from web.jobs import RqJobQueue
from web.readers import RedisReader

pytestmark = pytest.mark.unit

UNKNOWN = "sess_01JD0000000000000000000000"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def app_pair(client: redis.Redis, tmp_path: Path, token: str | None) -> tuple[Flask, Flask]:
    keys = Keys("wt")

    def build(fast: bool) -> Flask:
        return create_app(
            bus=SteerBus(client, keys),
            registry=SessionRegistry(client, keys),
            enqueue=RqJobQueue(bytes_client(client)),
            catalog=load_catalog(FIXTURE_WORKFLOWS),
            settings=settings_for(tmp_path, token),
            event_reader=RedisReader(client, keys),
            fast_steer=fast,
        )

    return build(True), build(False)


Case = tuple[str, Callable[[str], dict[str, Any]]]
CASES: list[Case] = [
    ("accepted", lambda sid: {"json": {"text": "hello", "clientMsgId": "c"}}),
    ("blank text", lambda sid: {"json": {"text": "  "}}),
    ("no text", lambda sid: {"json": {"clientMsgId": "c"}}),
    ("bool turn", lambda sid: {"json": {"text": "x", "expectedTurnId": True}}),
    ("no live turn", lambda sid: {"json": {"text": "x", "expectedTurnId": 1}}),
    ("unknown field", lambda sid: {"json": {"text": "x", "extra": 1}}),
    ("bad cid", lambda sid: {"json": {"text": "x", "clientMsgId": "a b"}}),
    ("not json", lambda sid: {"data": b"{nope", "content_type": "application/json"}),
    ("array", lambda sid: {"data": b"[]", "content_type": "application/json"}),
    ("text/plain", lambda sid: {"data": b'{"text":"x"}', "content_type": "text/plain"}),
    ("+json", lambda sid: {"data": b'{"text":"x"}', "content_type": "application/vnd.x+json"}),
    ("too large", lambda sid: {"data": b"x" * (1024 * 1024 + 1), "content_type": "application/json"}),
    ("unknown session", lambda sid: {"path": UNKNOWN, "json": {"text": "x"}}),
    ("malformed id", lambda sid: {"path": "sess_nope", "json": {"text": "x"}}),
    ("slash in id", lambda sid: {"path": "a/b", "json": {"text": "x"}}),
]


def ask(
    app: Flask, sid: str, case: Callable[[str], dict[str, Any]], headers: dict[str, str]
) -> tuple[Any, ...]:
    kwargs = case(sid)
    path = kwargs.pop("path", sid)
    response = app.test_client().post(f"/api/v2/sessions/{path}/steer", headers=headers, **kwargs)
    return response.status_code, response.mimetype, response.get_json(), response.headers.get("Retry-After")


@pytest.mark.parametrize(("name", "case"), CASES, ids=[name for name, _ in CASES])
def test_same_answers_with_and_without_the_fast_path(
    real_redis: redis.Redis, tmp_path: Path, name: str, case
) -> None:  # type: ignore[no-untyped-def]
    fast, slow = app_pair(real_redis, tmp_path, None)
    registry = SessionRegistry(real_redis, Keys("wt"))
    answers = []
    for app in (fast, slow):
        sid = registry.create(NewSession(workflowId="two-step", goal="g", workspacePath="/tmp"))
        answers.append(ask(app, sid, case, {}))
    assert answers[0] == answers[1]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, AUTH])
def test_same_auth_answers(real_redis: redis.Redis, tmp_path: Path, headers: dict[str, str]) -> None:
    fast, slow = app_pair(real_redis, tmp_path, TOKEN)
    registry = SessionRegistry(real_redis, Keys("wt"))
    answers = []
    for app in (fast, slow):
        sid = registry.create(NewSession(workflowId="two-step", goal="g", workspacePath="/tmp"))
        answers.append(ask(app, sid, CASES[0][1], headers))
    assert answers[0] == answers[1]
    assert answers[0][0] == (200 if headers == AUTH else 401)


def test_duplicate_and_reuse_are_the_same(real_redis: redis.Redis, tmp_path: Path) -> None:
    fast, slow = app_pair(real_redis, tmp_path, None)
    sid = SessionRegistry(real_redis, Keys("wt")).create(
        NewSession(workflowId="two-step", goal="g", workspacePath="/tmp")
    )
    first = fast.test_client().post(f"/api/v2/sessions/{sid}/steer", json={"text": "a", "clientMsgId": "m"})
    again = slow.test_client().post(f"/api/v2/sessions/{sid}/steer", json={"text": "a", "clientMsgId": "m"})
    other = fast.test_client().post(f"/api/v2/sessions/{sid}/steer", json={"text": "b", "clientMsgId": "m"})
    assert again.get_json() == {**first.get_json(), "status": "duplicate"}
    assert other.status_code == 422


def test_chunked_body_falls_back_to_flask(real_redis: redis.Redis, tmp_path: Path) -> None:
    fast, _ = app_pair(real_redis, tmp_path, None)
    sid = SessionRegistry(real_redis, Keys("wt")).create(
        NewSession(workflowId="two-step", goal="g", workspacePath="/tmp")
    )
    import io

    body = b'{"text": "chunked"}'
    response = fast.test_client().post(
        f"/api/v2/sessions/{sid}/steer",
        input_stream=io.BytesIO(body),
        content_type="application/json",
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert response.status_code == 200 and response.get_json()["status"] == "accepted"


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [("application/json", True), ("Application/JSON; charset=utf-8", True), ("application/a+json", True),
     ("text/json", False), ("", False), ("application/jsonx", False)],
)  # fmt: skip
def test_json_mimetypes(content_type: str, expected: bool) -> None:
    assert is_json_content_type(content_type) is expected


def test_a_bug_in_the_fast_path_is_a_logged_500_json(
    real_redis: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fast, _ = app_pair(real_redis, tmp_path, None)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in accept")

    monkeypatch.setattr(SteerBus, "accept", broken)
    sid = SessionRegistry(real_redis, Keys("wt")).create(
        NewSession(workflowId="two-step", goal="g", workspacePath="/tmp")
    )
    response = fast.test_client().post(f"/api/v2/sessions/{sid}/steer", json={"text": "x"})
    assert response.status_code == 500 and response.get_json()["code"] == "internal_error"
    assert "a bug in accept" in caplog.text


NON_ASCII_TOKEN = "tökén"  # refused by Settings; bearer_ok must still never match it loosely


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("Bearer s3cret-token", 200),
        # Non-ASCII bytes on the wire, as a WSGI server hands them over (latin-1 text).
        ("Bearer s3cret-tokén".encode().decode("latin-1"), 401),
        ("Bearer s3cret-tokén", 401),
        ("bearer s3cret-token", 401),
    ],
)
def test_a_header_gets_the_same_answer_on_the_fast_path_and_on_flask(
    real_redis: redis.Redis, tmp_path: Path, header: str, status: int
) -> None:
    web = make_web(real_redis, tmp_path, token="s3cret-token")
    sid = web.new_session()
    headers = {"Authorization": header}
    steer = web.http.post(f"/api/v2/sessions/{sid}/steer", json={"text": "x"}, headers=headers)  # fast path
    read = web.http.get(f"/api/v2/sessions/{sid}", headers=headers)  # Flask
    assert (steer.status_code, read.status_code) == (status, status)


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer tökén".encode().decode("latin-1"), True),
        ("Bearer tökén", False),
        ("Bearer tök€n", False),  # no WSGI server hands over a character beyond latin-1
        ("Bearer ", False),
        ("", False),
    ],
)
def test_bearer_ok(header: str, ok: bool) -> None:
    assert bearer_ok(header, expected_bearer(NON_ASCII_TOKEN)) is ok
    assert bearer_ok("Bearer a€b", expected_bearer("a?b")) is False  # no "replace" look-alike
