"""Every check of a steer request (web/steerchecks.py) refuses alike on both ways a steer
comes in: the WSGI fast path (web/fastpath.py) and the Flask view. One bad request per
check (a table row), sent to an app with the fast path and to one without; the answers are
the same, status, code and body, and the expected ones. Every check has a row. fakeredis."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask

from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.workflows import load_catalog
from tests.web.conftest import FIXTURE_WORKFLOWS, TOKEN, settings_for
from web import steerchecks
from web.app import MAX_CONTENT_LENGTH, create_app
from web.fastpath import SteerFastPath
from web.readers import RedisReader
from web.steerchecks import STEER_CHECKS, Check

pytestmark = pytest.mark.unit

MAX_STEER_BYTES = 64


class Stalling(io.BytesIO):
    """A body that never arrives: the read times out (gunicorn's socket timeout)."""

    def read(self, size: int | None = -1) -> bytes:
        raise TimeoutError("timed out")


@dataclass
class Row:
    check: Check
    name: str
    expected: tuple[int, str]
    request: Callable[[], dict[str, Any]]  # the test client's post(...) arguments
    path: str | None = None  # the session id in the path (None: a session that exists)
    token: str | None = None
    standalone: bool = False


def steer(text: str = "x", **more: Any) -> Callable[[], dict[str, Any]]:
    return lambda: {"json": {"text": text}, **more}


def sent(body: bytes, content_type: str = "application/json", **more: Any) -> Callable[[], dict[str, Any]]:
    return lambda: {"data": body, "content_type": content_type, **more}


def declared(length: str, body: bytes = b'{"text": "x"}') -> Callable[[], dict[str, Any]]:
    """A body sent with the Content-Length header `length`, whatever its size."""
    return sent(body, environ_overrides={"CONTENT_LENGTH": length})


ROWS = [
    Row(steerchecks.guarded, "no token", (401, "unauthorized"), steer(), token=TOKEN),
    Row(
        steerchecks.guarded,
        "wrong token",
        (401, "unauthorized"),
        steer(headers={"Authorization": "Bearer nope"}),
        token=TOKEN,
    ),
    Row(
        steerchecks.guarded,
        "a Host not loopback",
        (403, "forbidden_host"),
        steer(headers={"Host": "evil.example"}),
    ),
    Row(
        steerchecks.guarded,
        "cross-site",
        (403, "forbidden_origin"),
        steer(headers={"Sec-Fetch-Site": "cross-site"}),
    ),
    Row(
        steerchecks.guarded,
        "text/plain",
        (415, "unsupported_media_type"),
        sent(b'{"text": "x"}', "text/plain"),
    ),
    Row(steerchecks.has_channel, "standalone", (503, "no_steer_channel"), steer(), standalone=True),
    Row(steerchecks.session_id, "malformed id", (404, "session_not_found"), steer(), path="sess_nope"),
    Row(steerchecks.session_id, "dots", (404, "session_not_found"), steer(), path=".."),
    Row(steerchecks.length_allowed, "Content-Length not a number", (400, "invalid_request"), declared("13x")),
    Row(steerchecks.length_allowed, "Content-Length negative", (400, "invalid_request"), declared("-1")),
    Row(
        steerchecks.length_allowed,
        "over the body limit",
        (413, "payload_too_large"),
        sent(b"x" * (MAX_CONTENT_LENGTH + 1)),
    ),
    Row(
        steerchecks.body_read,
        "a body that stalls",
        (408, "request_timeout"),
        lambda: {"input_stream": Stalling(), "content_length": 20, "content_type": "application/json"},
    ),
    Row(
        steerchecks.body_parsed,
        "not JSON",
        (400, "invalid_request"),
        sent(b"{nope"),
    ),
    Row(steerchecks.body_parsed, "blank text", (400, "invalid_request"), steer("  ")),
    Row(steerchecks.body_parsed, "shorter than declared", (400, "invalid_request"), declared("5")),
    Row(
        steerchecks.text_within_limit,
        "text over WORKTRAIN_MAX_STEER_BYTES",
        (413, "steer_too_large"),
        steer("é" * (MAX_STEER_BYTES // 2 + 1)),
    ),
]


def build(client: redis.Redis, tmp_path: Path, row: Row, fast: bool) -> Flask:
    keys = Keys("wt")
    return create_app(
        bus=None if row.standalone else SteerBus(client, keys),
        registry=None if row.standalone else SessionRegistry(client, keys),
        enqueue=None,
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(tmp_path, row.token, max_steer_bytes=MAX_STEER_BYTES),
        event_reader=RedisReader(client, keys),
        fast_steer=fast,
    )


def flask_calls(app: Flask) -> list[str]:
    """The paths the fast path hands on to Flask (it must hand on none of these steers)."""
    fast = app.wsgi_app
    assert isinstance(fast, SteerFastPath)
    inner, handed = fast.inner, []

    def recording(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        handed.append(environ["PATH_INFO"])
        return inner(environ, start_response)

    fast.inner = recording
    return handed


def answer(app: Flask, session_id: str, row: Row) -> tuple[int, str, dict[str, Any]]:
    response = app.test_client().post(f"/api/v2/sessions/{session_id}/steer", **row.request())
    body = response.get_json()
    assert response.mimetype == "application/json", response.data[:200]
    return response.status_code, body["code"], body


@pytest.mark.parametrize("row", ROWS, ids=[f"{row.check.__name__}: {row.name}" for row in ROWS])
def test_each_check_refuses_alike_on_the_fast_path_and_on_flask(
    fake_redis: redis.Redis, tmp_path: Path, row: Row
) -> None:
    bus = SteerBus(fake_redis, Keys("wt"))
    session = SessionRegistry(fake_redis, Keys("wt")).create(
        NewSession(workflowId="two-step", goal="g", workspacePath="/tmp")
    )
    fast, flask_only = (
        build(fake_redis, tmp_path, row, fast=True),
        build(fake_redis, tmp_path, row, fast=False),
    )
    handed = flask_calls(fast)
    on_the_fast_path = answer(fast, row.path or session, row)
    on_flask = answer(flask_only, row.path or session, row)
    assert handed == [], "the fast path handed the steer to Flask"
    assert on_the_fast_path == on_flask
    assert on_the_fast_path[:2] == row.expected
    assert bus.pending(session) == []  # refused: nothing reached the session


def test_every_check_has_a_row() -> None:
    assert {row.check for row in ROWS} == set(STEER_CHECKS)
