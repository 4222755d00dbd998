"""Report back (README's Triggers): a session a trigger started with `reportBack: comment` gets one
comment on its item when it ends, through the webhook outbox (retried, never twice), judged
by what the fake GitHub and GitLab hold.

The session's end (emit.lua, its `session_completed`) queues one `trigger.comment` delivery;
the real sender with the real poster sends it: the outcome, the branch and the final notes
on the issue; a 500 first is retried and one comment results; a 500 answered AFTER the
comment was written (an ambiguous failure) is not posted again; a sender that cannot read
the token leaves it for a later try; a comment never goes to another host than apiUrl.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from daemon.bus.fleet.triggers import TriggerStore
from daemon.bus.keys import Keys
from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.session.attemptevents import AttemptEvents
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.clock import epoch_ms
from daemon.schema.events import SessionCompleted, StepAdvanced
from daemon.schema.records import SessionStatus, TriggerItem, TriggerOrigin
from daemon.schema.webhookpayloads import COMMENT_TYPE, RetryPolicy, WebhookRouting
from daemon.triggers.loading import TriggerSet
from daemon.triggers.reportback import CommentPoster
from daemon.webhooks.sender import WebhookSender
from tests.fakes.github import TOKEN as GH_TOKEN
from tests.fakes.github import FakeGitHub
from tests.fakes.gitlab import TOKEN as GL_TOKEN
from tests.fakes.gitlab import FakeGitLab
from tests.triggers.conftest import triggers_from

pytestmark = pytest.mark.redis  # the tier (tests/tiers.py on the tiers branch)

NOTES = "Fixed the crash on save: the writer now flushes before it closes. Added a test for empty files."


def github_trigger(tmp: Path, api: str) -> TriggerSet:
    return triggers_from(f"""
    - id: fix-issues
      source: github
      mode: webhook
      events: [issues.labeled]
      secretEnv: TEST_GH_SECRET
      tokenEnv: TEST_GH_TOKEN
      apiUrl: {api}
      workflowId: two-step
      goal: "Fix #{{{{ issue.number }}}}"
      workspacePath: {tmp}
      reportBack: comment
    """)


def finished_session(client: redis.Redis, origin: TriggerOrigin) -> str:
    keys = Keys("wt")
    bus = SteerBus(client, keys, retention_seconds=3600)
    registry = SessionRegistry(client, keys)
    sid = registry.create(
        NewSession(workflowId="two-step", goal="Fix #1", workspacePath="/tmp", trigger=origin)
    )
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    outbox = WebhookOutbox(client, keys, WebhookRouting(), 3600)
    events = AttemptEvents(EventSink(client, keys, None, webhooks=outbox), channel)
    events.emit(
        StepAdvanced(
            sessionId=sid, turnId=1, fromStepId="s1", toStepId=None, stepIndex=2, stepCount=2, notes=NOTES
        )
    )
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")
    events.emit(SessionCompleted(sessionId=sid, status="completed", outcome="workflow_complete"))
    return sid


def sender_for(client: redis.Redis, triggers: TriggerSet, tokens: dict[str, str]) -> WebhookSender:
    keys = Keys("wt")
    poster = CommentPoster(triggers, TriggerStore(client, keys), SessionRegistry(client, keys), tokens.get)
    outbox = WebhookOutbox(client, keys, WebhookRouting(), 3600)
    policy = RetryPolicy(base_seconds=0.01, max_seconds=0.05, timeout_seconds=5)
    return WebhookSender(outbox, EventSink(client, keys, None), policy, posters={COMMENT_TYPE: poster})


def send_until_settled(client: redis.Redis, sender: WebhookSender, tries: int = 10) -> list[str]:
    results = []
    outbox = sender.outbox
    for _ in range(tries):
        taken = outbox.claim(epoch_ms() + 1000, 15_000, 10)
        if not taken:
            if outbox.pending_count() == 0:
                break
            continue
        results += [sender.send(delivery) for delivery in taken]
    return results


def origin_for(github: FakeGitHub, number: int) -> TriggerOrigin:
    return TriggerOrigin(
        triggerId="fix-issues", key=f"github:acme/app#{number}", event="issues.labeled", deliveryId="d-1",
        item=TriggerItem(provider="github", kind="issue", repo="acme/app", number=number),
        commentsUrl=f"{github.url}/repos/acme/app/issues/{number}/comments",
    )  # fmt: skip


@pytest.mark.parametrize("after_write", [False, True], ids=["500 first", "500 after the write"])
def test_the_end_posts_one_comment_even_when_the_fake_answers_500_first(
    real_redis: redis.Redis, tmp_path: Path, github: FakeGitHub, after_write: bool
) -> None:
    issue = github.open_issue("Crash on save", labels=["agent"])
    sid = finished_session(real_redis, origin_for(github, issue.number))
    github.fail("POST", f"/repos/acme/app/issues/{issue.number}/comments", 500, after_write=after_write)
    sender = sender_for(real_redis, github_trigger(tmp_path, github.url), {"TEST_GH_TOKEN": GH_TOKEN})
    results = send_until_settled(real_redis, sender)
    assert results == ["retry", "delivered"]
    comments = github.comments_on(issue.number)
    assert len(comments) == 1, comments
    body = comments[0]["body"]
    assert f"WorkTrain session `{sid}` completed" in body and "workflow_complete" in body
    assert "> Fixed the crash on save" in body
    posts = github.requests("POST")
    assert len(posts) == (1 if after_write else 2)
    assert all(r.headers["authorization"] == f"Bearer {GH_TOKEN}" for r in github.requests())


def test_without_the_token_it_waits_for_a_worker_that_has_it(
    real_redis: redis.Redis, tmp_path: Path, github: FakeGitHub
) -> None:
    issue = github.open_issue("Crash", labels=["agent"])
    finished_session(real_redis, origin_for(github, issue.number))
    triggers = github_trigger(tmp_path, github.url)
    assert set(send_until_settled(real_redis, sender_for(real_redis, triggers, {}), tries=2)) == {"retry"}
    assert github.requests() == [] and github.comments_on(issue.number) == []
    send_until_settled(real_redis, sender_for(real_redis, triggers, {"TEST_GH_TOKEN": GH_TOKEN}))
    assert len(github.comments_on(issue.number)) == 1


def test_a_comments_url_on_another_host_gets_no_token(
    real_redis: redis.Redis, tmp_path: Path, github: FakeGitHub
) -> None:
    other = FakeGitHub()
    try:
        issue = other.open_issue("Elsewhere")
        origin = origin_for(other, issue.number)  # the record says another host than apiUrl
        finished_session(real_redis, origin)
        sender = sender_for(real_redis, github_trigger(tmp_path, github.url), {"TEST_GH_TOKEN": GH_TOKEN})
        assert set(send_until_settled(real_redis, sender, tries=2)) == {"retry"}
        assert other.requests() == [] and github.requests() == []
    finally:
        other.close()


def test_a_gitlab_merge_request_gets_one_note(
    real_redis: redis.Redis, tmp_path: Path, gitlab: FakeGitLab
) -> None:
    mr = gitlab.open("merge_request", "Add a cache")
    triggers = triggers_from(f"""
    - id: fix-issues
      source: gitlab
      mode: webhook
      events: [merge_request.open]
      secretEnv: TEST_GL_SECRET
      tokenEnv: TEST_GL_TOKEN
      apiUrl: {gitlab.url}/api/v4
      workflowId: two-step
      goal: "Review !{{{{ merge_request.iid }}}}"
      workspacePath: {tmp_path}
      reportBack: comment
    """)
    origin = TriggerOrigin(
        triggerId="fix-issues", key="gitlab:acme/app!1", event="merge_request.open", deliveryId="d-2",
        item=TriggerItem(provider="gitlab", kind="merge_request", repo="acme/app", number=mr.iid),
        commentsUrl=f"{gitlab.url}/api/v4/projects/acme%2Fapp/merge_requests/{mr.iid}/notes",
    )  # fmt: skip
    finished_session(real_redis, origin)
    gitlab.fail("POST", "/api/v4/projects/acme%2Fapp/merge_requests/1/notes", 502, after_write=True)
    results = send_until_settled(real_redis, sender_for(real_redis, triggers, {"TEST_GL_TOKEN": GL_TOKEN}))
    assert results == ["retry", "delivered"]
    notes = gitlab.items[("merge_request", mr.iid)].notes
    assert len(notes) == 1 and "workflow_complete" in notes[0]["body"]
    assert all(r.headers["private-token"] == GL_TOKEN for r in gitlab.requests())
