"""Fixtures for the web tier: the real app (create_app) over real Redis or fakeredis.

`web` is parametrized over both (like the bus tests); `real_web` is real Redis only, for
what RQ, threads, round trips or blocking reads need. No Redis mock anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.mirror import EventMirror
from daemon.host.config import Settings
from daemon.workflows import load_catalog
from web.app import create_app
from web.jobs import RqJobQueue
from web.readers import RedisReader

FIXTURE_WORKFLOWS = Path(__file__).resolve().parents[1] / "fixtures" / "workflows"
TOKEN = "web-test-token-7f3a9c21e8b64d05aa19c3e7b2d4f6a8"


def settings_for(data_dir: Path, token: str | None = None, **overrides: Any) -> Settings:
    return Settings(data_dir=data_dir, api_token=token, workflows_dir=FIXTURE_WORKFLOWS, **overrides)


def bytes_client(client: redis.Redis) -> redis.Redis:
    """A decode_responses=False client on the same server (what RQ needs)."""
    kwargs = client.connection_pool.connection_kwargs
    if isinstance(client, fakeredis.FakeRedis):
        return fakeredis.FakeRedis(host=kwargs["host"], port=kwargs["port"])
    return redis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs.get("db", 0))


class JsonClient(FlaskClient):
    """A test client that declares a state change JSON, as the CLI and the console do (the
    server refuses a POST, PATCH or DELETE that is not: web/auth.py). A test that passes its
    own `data`, `json` or `content_type` sends exactly that."""

    def open(self, *args: Any, **kwargs: Any) -> TestResponse:
        method = str(kwargs.get("method", "GET")).upper()
        declared = {"data", "json", "content_type"} & kwargs.keys() or "Content-Type" in kwargs.get(
            "headers", {}
        )
        if method in ("POST", "PATCH", "DELETE") and not declared:
            kwargs["content_type"] = "application/json"
        return super().open(*args, **kwargs)


@dataclass
class Web:
    app: Flask
    http: FlaskClient
    client: redis.Redis
    bus: SteerBus
    registry: SessionRegistry
    mirror: EventMirror
    keys: Keys
    data_dir: Path

    def new_session(self) -> str:
        """A queued session registered directly (no RQ job)."""
        return self.registry.create(
            NewSession(workflowId="two-step", goal="g", workspacePath="/tmp", stepCount=2)
        )

    def steer(self, session_id: str, body: Any = None, **kwargs: Any) -> TestResponse:
        return self.http.post(f"/api/v2/sessions/{session_id}/steer", json=body, **kwargs)

    def dispatch(self, **overrides: Any) -> TestResponse:
        body = {"workflowId": "two-step", "goal": "look around", "workspacePath": "/tmp/ws", **overrides}
        return self.http.post("/api/v2/auto/dispatch", json=body)


def make_web(client: redis.Redis, data_dir: Path, token: str | None = None, **settings: Any) -> Web:
    keys = Keys("wt")
    bus = SteerBus(client, keys, retention_seconds=3600)
    registry = SessionRegistry(client, keys)
    mirror = EventMirror(client, keys, data_dir)
    app = create_app(
        bus=bus,
        registry=registry,
        enqueue=RqJobQueue(bytes_client(client)),
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(data_dir, token, **settings),
        event_reader=RedisReader(client, keys),
        mirror=mirror,
    )
    app.test_client_class = JsonClient
    return Web(app, app.test_client(), client, bus, registry, mirror, keys, data_dir)


@pytest.fixture
def new_web(tmp_path: Path) -> Iterator[Callable[..., Web]]:
    """make_web for a test that needs its own settings; every mirror is flushed at the end
    (a mirror thread writing late would land in the next test's Redis)."""
    made: list[Web] = []

    def make(client: redis.Redis, data_dir: Path | None = None, **options: Any) -> Web:
        made.append(make_web(client, data_dir or tmp_path, **options))
        return made[-1]

    yield make
    for env in made:
        env.mirror.flush()


@pytest.fixture
def web(redis_client: redis.Redis, tmp_path: Path) -> Iterator[Web]:
    env = make_web(redis_client, tmp_path)
    yield env
    env.mirror.flush()


@pytest.fixture
def real_web(real_redis: redis.Redis, tmp_path: Path) -> Iterator[Web]:
    env = make_web(real_redis, tmp_path)
    yield env
    env.mirror.flush()


def error_of(response: TestResponse) -> tuple[int, str]:
    body = response.get_json()
    assert body["success"] is False and isinstance(body["error"], str) and body["error"]
    return response.status_code, body["code"]
