"""Fixtures for the trigger tests: a triggers file written for the test, the web app with it
(create_app over real Redis or fakeredis, as tests/web does), and the fake GitHub and GitLab."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.bus.fleet.triggers import TriggerStore
from daemon.bus.keys import Keys
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.mirror import EventMirror
from daemon.triggers.loading import TriggerSet, parse_triggers
from daemon.workflows import load_catalog
from tests.fakes.github import FakeGitHub
from tests.fakes.gitlab import FakeGitLab
from tests.web.conftest import FIXTURE_WORKFLOWS, JsonClient, bytes_client, settings_for
from web.app import create_app
from web.jobs import RqJobQueue
from web.readers import RedisReader

SECRET = "trigger-test-webhook-secret-5c1e"
GITLAB_SECRET = "gitlab-test-token-8a2b"


def triggers_from(text: str, path: Path | None = None) -> TriggerSet:
    return parse_triggers(textwrap.dedent(text), path or Path("triggers.yml"))


def github_webhook_trigger(tmp: Path, **extra: str) -> str:
    lines = {
        "id": "fix-labelled-issues",
        "source": "github",
        "mode": "webhook",
        "events": "[issues.labeled, issue_comment.created, pull_request.opened]",
        "filter": "{label: agent, repo: acme/app}",
        "secretEnv": "TEST_GH_WEBHOOK_SECRET",
        "workflowId": "two-step",
        "goal": '"Fix #{{ issue.number }}: {{ issue.title }}"',
        "context": '{issueUrl: "{{ issue.html_url }}"}',
        "workspacePath": str(tmp),
        "key": '"issue-{{ issue.number }}"',
        "whileRunning": "steer",
        **extra,
    }
    return "- " + "\n  ".join(f"{name}: {value}" for name, value in lines.items()) + "\n"


@dataclass
class TriggerWeb:
    http: JsonClient
    client: redis.Redis
    bus: SteerBus
    registry: SessionRegistry
    store: TriggerStore
    mirror: EventMirror
    keys: Keys

    def sessions(self) -> list[str]:
        return [str(s) for s in self.client.zrange(self.keys.sessions, 0, -1)]

    def post(self, trigger_id: str, body: bytes, headers: dict[str, str]) -> Any:
        return self.http.post(f"/api/v2/triggers/{trigger_id}", data=body, headers=headers)


def make_trigger_web(
    client: redis.Redis, data_dir: Path, triggers: TriggerSet, **settings: Any
) -> TriggerWeb:
    keys = Keys("wt")
    bus = SteerBus(client, keys, retention_seconds=3600)
    registry = SessionRegistry(client, keys)
    mirror = EventMirror(client, keys, data_dir)
    app = create_app(
        bus=bus,
        registry=registry,
        enqueue=RqJobQueue(bytes_client(client)),
        catalog=load_catalog(FIXTURE_WORKFLOWS),
        settings=settings_for(data_dir, settings.pop("api_token", None), **settings),
        event_reader=RedisReader(client, keys),
        mirror=mirror,
        triggers=triggers,
    )
    app.test_client_class = JsonClient
    store = TriggerStore(client, keys, 3600)
    return TriggerWeb(app.test_client(), client, bus, registry, store, mirror, keys)  # type: ignore[arg-type]


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    yield fake
    fake.close()


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    fake = FakeGitLab()
    yield fake
    fake.close()
