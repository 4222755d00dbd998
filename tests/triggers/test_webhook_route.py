"""`POST /api/v2/triggers/<id>` (README's Triggers) in the real app over real Redis and fakeredis:
GitHub's and GitLab's requests as the fakes build them from the providers' docs.

A signed issues.labeled starts one session whose goal is the rendered template; the same
delivery again starts none; a bad or missing signature is 401, a ping 202 ignored, a body
that is not JSON 400, a body over 1 MiB 413; an event for the key of a live session is a
steer of it (a redelivery: the same steer); two events for one key at once start one
session; a template field the event lacks is a 422 `trigger_error` said on the fire.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.bus.fleet.triggers import TriggerStore
from daemon.schema.records import SessionStatus
from tests.fakes.github import FakeGitHub, sign
from tests.fakes.gitlab import FakeGitLab
from tests.triggers.conftest import (
    GITLAB_SECRET,
    SECRET,
    TriggerWeb,
    github_webhook_trigger,
    make_trigger_web,
    triggers_from,
)

pytestmark = pytest.mark.redis  # the tier (tests/tiers.py on the tiers branch)


def gh_headers(event: str, body: bytes, delivery: str | None = None, secret: str = SECRET) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(secret, body),
        "User-Agent": "GitHub-Hookshot/2b4d6f8",
    }


@pytest.fixture
def hooked(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: FakeGitHub
) -> TriggerWeb:
    monkeypatch.setenv("TEST_GH_WEBHOOK_SECRET", SECRET)
    triggers = triggers_from(github_webhook_trigger(tmp_path))
    return make_trigger_web(redis_client, tmp_path, triggers)


def labelled(github: FakeGitHub, title: str = "Crash on save") -> tuple[Any, bytes]:
    issue = github.open_issue(title, labels=["agent"])
    return issue, json.dumps(github.issues_labeled(issue, "agent")).encode()


def test_a_signed_issues_labeled_starts_one_session_with_the_templated_goal(
    hooked: TriggerWeb, github: FakeGitHub
) -> None:
    issue, body = labelled(github)
    answer = hooked.post("fix-labelled-issues", body, gh_headers("issues", body))
    assert answer.status_code == 202, answer.get_json()
    data = answer.get_json()
    assert data["success"] is True and data["event"] == "issues.labeled"
    session_id = data["sessionId"]
    assert hooked.sessions() == [session_id]
    record = hooked.registry.get(session_id)
    assert record is not None and record.status is SessionStatus.QUEUED
    assert record.goal == f"Fix #{issue.number}: Crash on save"
    assert record.context == {"issueUrl": f"https://github.com/acme/app/issues/{issue.number}"}
    assert record.trigger is not None and record.trigger.key == f"issue-{issue.number}"
    state = hooked.store.state("fix-labelled-issues")
    assert (state.sessionsStarted, state.lastResult, state.fires) == (1, "started", 1)


def test_the_same_delivery_again_starts_nothing(hooked: TriggerWeb, github: FakeGitHub) -> None:
    _, body = labelled(github)
    headers = gh_headers("issues", body)
    first = hooked.post("fix-labelled-issues", body, headers).get_json()
    again = hooked.post("fix-labelled-issues", body, headers)
    assert again.status_code == 202
    assert again.get_json()["duplicate"] is True and again.get_json()["sessionId"] == first["sessionId"]
    assert hooked.sessions() == [first["sessionId"]]
    assert hooked.bus.pending(first["sessionId"]) == []  # nor a steer of the session it started
    assert hooked.store.state("fix-labelled-issues").sessionsStarted == 1


@pytest.mark.parametrize("signature", ["sha256=" + "0" * 64, None, "sha1=abc"])
def test_a_bad_or_missing_signature_is_401(
    hooked: TriggerWeb, github: FakeGitHub, signature: str | None
) -> None:
    _, body = labelled(github)
    headers = gh_headers("issues", body)
    if signature is None:
        del headers["X-Hub-Signature-256"]
    else:
        headers["X-Hub-Signature-256"] = signature
    answer = hooked.post("fix-labelled-issues", body, headers)
    assert (answer.status_code, answer.get_json()["code"]) == (401, "bad_signature")
    assert hooked.sessions() == []


def test_a_body_signed_with_another_secret_is_401(hooked: TriggerWeb, github: FakeGitHub) -> None:
    _, body = labelled(github)
    answer = hooked.post("fix-labelled-issues", body, gh_headers("issues", body, secret="not-the-secret"))
    assert answer.status_code == 401
    assert hooked.sessions() == []


def test_a_ping_is_202_ignored(hooked: TriggerWeb) -> None:
    body = json.dumps(FakeGitHub.ping()).encode()
    answer = hooked.post("fix-labelled-issues", body, gh_headers("ping", body))
    assert answer.status_code == 202
    assert answer.get_json()["ignored"] == "ping"
    assert hooked.sessions() == []


def test_an_event_the_trigger_does_not_take_is_202_ignored_with_the_reason(
    hooked: TriggerWeb, github: FakeGitHub
) -> None:
    issue = github.open_issue("Not for the agent", labels=["bug"])
    body = json.dumps(github.issues_labeled(issue, "bug")).encode()
    answer = hooked.post("fix-labelled-issues", body, gh_headers("issues", body))
    assert answer.status_code == 202 and "not labelled agent" in answer.get_json()["ignored"]
    opened = json.dumps({**github.issues_labeled(issue, "agent"), "action": "opened"}).encode()
    answer = hooked.post("fix-labelled-issues", opened, gh_headers("issues", opened))
    assert "issues.opened is not one of" in answer.get_json()["ignored"]
    assert hooked.sessions() == []


def test_malformed_json_is_400(hooked: TriggerWeb) -> None:
    body = b'{"action": "labeled", "issue": '
    answer = hooked.post("fix-labelled-issues", body, gh_headers("issues", body))
    assert (answer.status_code, answer.get_json()["code"]) == (400, "invalid_request")
    body = b"[1, 2]"
    assert hooked.post("fix-labelled-issues", body, gh_headers("issues", body)).status_code == 400


def test_a_body_over_one_mib_is_413(hooked: TriggerWeb, github: FakeGitHub) -> None:
    issue = github.open_issue("Huge", labels=["agent"])
    payload = github.issues_labeled(issue, "agent")
    payload["issue"]["body"] = "x" * (1024 * 1024)
    body = json.dumps(payload).encode()
    answer = hooked.post("fix-labelled-issues", body, gh_headers("issues", body))
    assert (answer.status_code, answer.get_json()["code"]) == (413, "payload_too_large")
    assert hooked.sessions() == []


def test_an_unknown_trigger_is_404_and_a_form_encoded_hook_is_taken(
    hooked: TriggerWeb, github: FakeGitHub
) -> None:
    _, body = labelled(github)
    answer = hooked.post("no-such-trigger", body, gh_headers("issues", body))
    assert (answer.status_code, answer.get_json()["code"]) == (404, "trigger_not_found")
    from urllib.parse import urlencode

    form = urlencode({"payload": body.decode()}).encode()
    headers = {**gh_headers("issues", form), "Content-Type": "application/x-www-form-urlencoded"}
    answer = hooked.post("fix-labelled-issues", form, headers)
    assert answer.status_code == 202 and answer.get_json()["sessionId"]


def test_the_bearer_token_is_not_what_guards_it(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: FakeGitHub
) -> None:
    """With WORKTRAIN_API_TOKEN set, a provider's request (no bearer) is judged by its signature;
    and the other trigger routes stay behind the token."""
    monkeypatch.setenv("TEST_GH_WEBHOOK_SECRET", SECRET)
    token = "a-long-enough-api-token-for-the-trigger-tests-0123"
    web = make_trigger_web(
        redis_client, tmp_path, triggers_from(github_webhook_trigger(tmp_path)), api_token=token
    )
    _, body = labelled(github)
    assert web.post("fix-labelled-issues", body, gh_headers("issues", body)).status_code == 202
    assert web.http.get("/api/v2/triggers").status_code == 401
    listed = web.http.get("/api/v2/triggers", headers={"Authorization": f"Bearer {token}"}).get_json()
    assert [t["id"] for t in listed["data"]["triggers"]] == ["fix-labelled-issues"]
    assert SECRET not in json.dumps(listed)


def test_a_comment_on_the_item_of_a_live_session_steers_it_once(
    hooked: TriggerWeb, github: FakeGitHub
) -> None:
    issue, body = labelled(github)
    session_id = hooked.post("fix-labelled-issues", body, gh_headers("issues", body)).get_json()["sessionId"]
    comment = github.comment(issue.number, "Please also cover the empty file case.")
    said = json.dumps(github.issue_comment_created(issue, comment)).encode()
    headers = gh_headers("issue_comment", said)
    first = hooked.post("fix-labelled-issues", said, headers)
    assert first.status_code == 202, first.get_json()
    assert first.get_json()["steered"] == {"sessionId": session_id, "offset": 1}
    again = hooked.post("fix-labelled-issues", said, headers).get_json()
    assert again["duplicate"] is True and again["steered"] == {"sessionId": session_id, "offset": 1}
    pending = hooked.bus.pending(session_id)
    assert len(pending) == 1 and "Please also cover the empty file case." in pending[0].text
    assert pending[0].text.startswith("@bob commented on #")
    assert hooked.sessions() == [session_id]


def test_two_events_for_one_key_at_once_start_one_session(
    real_redis: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: FakeGitHub
) -> None:
    """Both read "no session for this key" before either dispatches (a barrier right after the
    read makes sure of it): the key's binding, WATCHed by each dispatch, lets one start a
    session; the other reads again, finds it live, and steers it."""
    monkeypatch.setenv("TEST_GH_WEBHOOK_SECRET", SECRET)
    web = make_trigger_web(real_redis, tmp_path, triggers_from(github_webhook_trigger(tmp_path)))
    both_read = threading.Barrier(2)
    original = TriggerStore.bound

    def bound_then_wait(self: TriggerStore, trigger_id: str, key: str) -> str | None:
        found = original(self, trigger_id, key)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_read.wait(timeout=2)
        return found

    monkeypatch.setattr(TriggerStore, "bound", bound_then_wait)
    issue = github.open_issue("Race", labels=["agent"])
    bodies = []
    for n in range(2):
        comment = github.comment(issue.number, f"comment {n}")
        bodies.append(json.dumps(github.issue_comment_created(issue, comment)).encode())
    answers: list[dict[str, Any]] = []

    def send(body: bytes) -> None:
        answers.append(web.post("fix-labelled-issues", body, gh_headers("issue_comment", body)).get_json())

    threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(web.sessions()) == 1, answers
    started = [a for a in answers if "sessionId" in a and "steered" not in a]
    steered = [a for a in answers if "steered" in a]
    assert len(started) == 1 and len(steered) == 1, answers
    assert steered[0]["steered"]["sessionId"] == started[0]["sessionId"]


def test_a_template_field_the_event_lacks_is_a_422_said_on_the_fire(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: FakeGitHub
) -> None:
    monkeypatch.setenv("TEST_GH_WEBHOOK_SECRET", SECRET)
    text = github_webhook_trigger(tmp_path, goal='"Review {{ pull_request.title }}"')
    web = make_trigger_web(redis_client, tmp_path, triggers_from(text))
    _, body = labelled(github)
    answer = web.post("fix-labelled-issues", body, gh_headers("issues", body))
    assert (answer.status_code, answer.get_json()["code"]) == (422, "trigger_error")
    assert "goal" in answer.get_json()["error"] and "pull_request" in answer.get_json()["error"]
    fires = web.store.fires("fix-labelled-issues")
    assert fires[0].result == "error" and "pull_request" in (fires[0].error or "")
    assert web.store.state("fix-labelled-issues").lastError
    assert web.sessions() == []


def test_gitlab_merge_request_open_with_its_token(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gitlab: FakeGitLab
) -> None:
    monkeypatch.setenv("TEST_GL_TOKEN", GITLAB_SECRET)
    text = f"""
    - id: review-mrs
      source: gitlab
      mode: webhook
      events: [merge_request.open]
      filter: {{project: acme/app}}
      secretEnv: TEST_GL_TOKEN
      workflowId: two-step
      goal: "Review !{{{{ merge_request.iid }}}}: {{{{ merge_request.title }}}}"
      workspacePath: {tmp_path}
    """
    web = make_trigger_web(redis_client, tmp_path, triggers_from(text))
    mr = gitlab.open("merge_request", "Add a cache")
    body = json.dumps(gitlab.hook(mr, "open")).encode()
    headers = {
        "Content-Type": "application/json",
        "X-Gitlab-Event": "Merge Request Hook",
        "Idempotency-Key": "k-1",
    }
    assert web.post("review-mrs", body, {**headers, "X-Gitlab-Token": "wrong"}).status_code == 401
    answer = web.post("review-mrs", body, {**headers, "X-Gitlab-Token": GITLAB_SECRET})
    assert answer.status_code == 202, answer.get_json()
    record = web.registry.get(answer.get_json()["sessionId"])
    assert record is not None and record.goal == "Review !1: Add a cache"
    again = web.post("review-mrs", body, {**headers, "X-Gitlab-Token": GITLAB_SECRET}).get_json()
    assert again["duplicate"] is True
    assert len(web.sessions()) == 1
