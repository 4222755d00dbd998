"""`whileRunning` (README's Triggers): an event whose key has a live session is queued until that
session ends and then starts the next one (`queue`), or passed over (`ignore`); a polled item
updated while its session runs steers it (`steer`). Over real Redis and fakeredis, the trigger's
loop ticked by hand."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.steerbus import SteerBus
from daemon.schema.records import SessionStatus
from daemon.triggers.runner import TriggerLoop
from daemon.workflows import load_catalog
from tests.fakes.github import TOKEN as GH_TOKEN
from tests.fakes.github import FakeGitHub, sign
from tests.triggers.conftest import (
    SECRET,
    TriggerWeb,
    github_webhook_trigger,
    make_trigger_web,
    triggers_from,
)
from tests.triggers.test_polling import github_poll, goals, loop_for
from tests.web.conftest import FIXTURE_WORKFLOWS, bytes_client, settings_for
from web.jobs import RqJobQueue

pytestmark = pytest.mark.redis  # the tier (tests/tiers.py on the tiers branch)


def post(
    web: TriggerWeb, event: str, payload: dict[str, object], delivery: str | None = None
) -> dict[str, object]:
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(SECRET, body),
    }
    answer = web.post("fix-labelled-issues", body, headers)
    assert answer.status_code == 202, answer.get_json()
    return dict(answer.get_json())


def end(client: redis.Redis, session_id: str) -> None:
    channel = SteerBus(client, Keys("wt"), retention_seconds=3600).channel(session_id, "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")


def webhook_loop(client: redis.Redis, tmp: Path, text: str) -> TriggerLoop:
    from daemon.triggers.setup import build_firing

    (trigger,) = list(triggers_from(text))
    bus = SteerBus(client, Keys("wt"), retention_seconds=3600)
    firing = build_firing(
        settings_for(tmp), bus, RqJobQueue(bytes_client(client)), load_catalog(FIXTURE_WORKFLOWS)
    )
    return TriggerLoop(trigger, firing.store, firing, {}.get, 30_000)


def test_queue_fires_the_waiting_event_once_the_session_ends(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: FakeGitHub
) -> None:
    monkeypatch.setenv("TEST_GH_WEBHOOK_SECRET", SECRET)
    text = github_webhook_trigger(tmp_path, whileRunning="queue")
    web = make_trigger_web(redis_client, tmp_path, triggers_from(text))
    loop = webhook_loop(redis_client, tmp_path, text)
    assert loop.holds()
    issue = github.open_issue("Queue me", labels=["agent"])
    first = post(web, "issues", github.issues_labeled(issue, "agent"))
    comment = github.comment(issue.number, "And the docs too.")
    delivery = str(uuid.uuid4())
    queued = post(web, "issue_comment", github.issue_comment_created(issue, comment), delivery)
    assert queued["queued"] == {"sessionId": first["sessionId"], "key": f"issue-{issue.number}"}
    again = post(web, "issue_comment", github.issue_comment_created(issue, comment), delivery)
    assert again["duplicate"] is True and again["queued"] == queued["queued"]
    assert web.store.state("fix-labelled-issues").queued == 1
    loop.drain()
    assert len(web.sessions()) == 1  # its key's session still lives: it waits
    end(redis_client, str(first["sessionId"]))
    loop.drain()
    loop.drain()
    sessions = web.sessions()
    assert len(sessions) == 2 and web.store.state("fix-labelled-issues").queued == 0
    second = next(s for s in sessions if s != first["sessionId"])
    record = web.registry.get(second)
    assert record is not None and record.trigger is not None
    assert record.trigger.event == "issue_comment.created" and record.trigger.deliveryId == delivery
    assert [f.result for f in web.store.fires("fix-labelled-issues")] == ["started", "queued", "started"]


def test_ignore_passes_the_event_over_while_the_session_lives(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: FakeGitHub
) -> None:
    monkeypatch.setenv("TEST_GH_WEBHOOK_SECRET", SECRET)
    web = make_trigger_web(
        redis_client, tmp_path, triggers_from(github_webhook_trigger(tmp_path, whileRunning="ignore"))
    )
    issue = github.open_issue("Ignore", labels=["agent"])
    first = post(web, "issues", github.issues_labeled(issue, "agent"))
    comment = github.comment(issue.number, "ping?")
    ignored = post(web, "issue_comment", github.issue_comment_created(issue, comment))
    assert "whileRunning: ignore" in str(ignored["ignored"])
    assert web.bus.pending(str(first["sessionId"])) == [] and len(web.sessions()) == 1
    end(redis_client, str(first["sessionId"]))
    later = post(
        web, "issue_comment", github.issue_comment_created(issue, github.comment(issue.number, "now?"))
    )
    assert later["sessionId"] != first["sessionId"] and len(web.sessions()) == 2


def test_a_polled_item_updated_while_its_session_runs_steers_it(
    redis_client: redis.Redis, tmp_path: Path, github: FakeGitHub
) -> None:
    loop = loop_for(redis_client, tmp_path, github_poll(tmp_path, github.url), {"TEST_GH_TOKEN": GH_TOKEN})
    assert loop.holds()
    issue = github.open_issue("Polled", labels=["agent"])
    loop.poll()
    [sid] = [str(s) for s in redis_client.zrange(Keys("wt").sessions, 0, -1)]
    github.comment(issue.number, "a comment updates the issue")
    loop.poll()
    assert goals(redis_client) == [f"Fix #{issue.number}: Polled"]  # no second session
    pending = SteerBus(redis_client, Keys("wt"), retention_seconds=3600).pending(sid)
    assert len(pending) == 1 and f"#{issue.number}" in pending[0].text
    loop.poll()
    loop.poll()
    assert len(SteerBus(redis_client, Keys("wt"), retention_seconds=3600).pending(sid)) == 1
