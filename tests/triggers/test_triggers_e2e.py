"""Triggers end to end (README's Triggers): real stacks (redis-server, `worktrain web`, `worktrain
worker`, the fake model in this process) and the loopback fake of GitHub, judged by ground
truth — the sessions in Redis, what the fake model received, what the fake GitHub holds.

- a signed issues.labeled webhook starts one session with the templated goal; the same
  delivery again starts none; at its end one comment is on the issue, although the fake
  answered the first POST 500;
- an issue_comment.created on the issue of a running session is one steer, delivered once
  (the model's last request holds the comment once), also when GitHub redelivers it;
- a poll finds a new labelled issue: one session; kill -9 of every process (Redis too)
  and a restart: still one, once the new poller has polled again;
- two worker tiers ("hosts") on one Redis: one polls (the fake's request log), one session.
"""

from __future__ import annotations

import itertools
import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel import reply, text, tool
from daemon.host.embedded_redis import RedisServer
from tests.crash.harness import NOTES, SessionModel, Stack, stacks, user_texts, wait_until
from tests.fakes.github import TOKEN as GH_TOKEN
from tests.fakes.github import FakeGitHub, deliver

pytestmark = pytest.mark.e2e

SECRET = "e2e-github-webhook-secret-6f2a"
POLL_INTERVAL = 10  # the file's minimum


class StepModel(SessionModel):
    """Each turn: a line of text and continue_workflow (no Bash: the tests are about triggers)."""

    def answer(self, request: ModelRequest) -> ModelReply:
        return reply(text("On it."), tool("continue_workflow", notes=NOTES))


def triggers_file(stack: Stack, github: FakeGitHub) -> str:
    return textwrap.dedent(f"""\
    - id: gh-webhook
      source: github
      mode: webhook
      events: [issues.labeled, issue_comment.created]
      filter: {{label: agent}}
      secretEnv: TEST_E2E_GH_SECRET
      tokenEnv: TEST_E2E_GH_TOKEN
      apiUrl: {github.url}
      workflowId: crash-four
      goal: "Fix #{{{{ issue.number }}}}: {{{{ issue.title }}}}"
      workspacePath: {stack.workspace}
      whileRunning: steer
      reportBack: comment
    - id: gh-poll
      source: github
      mode: poll
      events: [issues]
      filter: {{label: poll-me}}
      tokenEnv: TEST_E2E_GH_TOKEN
      apiUrl: {github.url}
      repo: acme/app
      interval: {POLL_INTERVAL}
      workflowId: crash-four
      goal: "Polled #{{{{ issue.number }}}}: {{{{ issue.title }}}}"
      workspacePath: {stack.workspace}
    """)


def trigger_stack(tmp: Path, github: FakeGitHub) -> Iterator[Stack]:
    factory = stacks(tmp, Stack)
    stack = next(factory)(
        model=StepModel(latency=0.0),
        lease_seconds=2.0,
        idle_wait_seconds=20.0,
        concurrency=4,
        appendfsync="always",
    )
    path = stack.tmp / "triggers.yml"
    path.write_text(triggers_file(stack, github))
    stack.extra_env.update(
        {
            "WORKTRAIN_TRIGGERS_FILE": str(path),
            "TEST_E2E_GH_SECRET": SECRET,
            "TEST_E2E_GH_TOKEN": GH_TOKEN,
            "WORKTRAIN_WEBHOOK_BACKOFF_SECONDS": "0.2",
            "WORKTRAIN_WEBHOOK_BACKOFF_MAX_SECONDS": "1",
        }
    )
    stack.start(workers=1, processes=1)
    try:
        yield stack
    finally:
        next(factory, None)


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, github: FakeGitHub) -> Iterator[Stack]:
    yield from trigger_stack(tmp_path_factory.mktemp("triggers"), github)


def hook_url(stack: Stack, trigger: str = "gh-webhook") -> str:
    return f"{stack.url}/api/v2/triggers/{trigger}"


def sessions_with_goal(stack: Stack, prefix: str) -> list[str]:
    assert stack.client is not None
    ids = [str(s) for s in stack.client.zrange("wt:sessions", 0, -1)]
    return [s for s in ids if stack.record(s).get("goal", "").startswith(prefix)]


def test_a_signed_webhook_starts_one_session_and_its_end_posts_one_comment_despite_a_500(
    stack: Stack, github: FakeGitHub
) -> None:
    issue = github.open_issue("Crash on save", labels=["agent"])
    github.fail("POST", f"/repos/acme/app/issues/{issue.number}/comments", 500)
    payload = github.issues_labeled(issue, "agent")
    first = deliver(hook_url(stack), "issues", payload, SECRET)
    assert first.status == 202, first
    sid = first.body["sessionId"]
    again = deliver(hook_url(stack), "issues", payload, SECRET, delivery=first.delivery)
    assert again.status == 202 and again.body["duplicate"] is True and again.body["sessionId"] == sid
    assert deliver(hook_url(stack), "issues", payload, "wrong-secret").status == 401
    assert sessions_with_goal(stack, f"Fix #{issue.number}:") == [sid]
    assert stack.record(sid)["goal"] == f"Fix #{issue.number}: Crash on save"
    assert stack.wait_finished(sid)["status"] == "completed"
    wait_until(lambda: github.comments_on(issue.number), "the report-back comment", 30)
    time.sleep(1.5)  # a second comment would come within the backoff's cap
    comments = github.comments_on(issue.number)
    assert len(comments) == 1 and sid in comments[0]["body"] and "workflow_complete" in comments[0]["body"]
    posts = github.requests("POST", f"/repos/acme/app/issues/{issue.number}/comments")
    assert [p.status for p in posts] == [500, 201]


def test_a_comment_on_the_issue_of_a_running_session_is_one_steer_delivered_once(
    stack: Stack, github: FakeGitHub
) -> None:
    issue = github.open_issue("Slow feature", labels=["agent"])
    held_first: set[str] = set()

    def hold(sid: str, n: int) -> bool:
        return n == 1 and sid not in held_first and not held_first.add(sid)  # type: ignore[func-returns-value]

    stack.model.hold_when = hold
    try:
        sid = deliver(hook_url(stack), "issues", github.issues_labeled(issue, "agent"), SECRET).body[
            "sessionId"
        ]
        wait_until(lambda: stack.model.held(sid), "the first model call held", 30)
        said = "Please keep the public API unchanged."
        comment = github.comment(issue.number, said)
        payload = github.issue_comment_created(issue, comment)
        steered = deliver(hook_url(stack), "issue_comment", payload, SECRET)
        assert steered.status == 202 and steered.body["steered"] == {"sessionId": sid, "offset": 1}, steered
        redelivered = deliver(hook_url(stack), "issue_comment", payload, SECRET, delivery=steered.delivery)
        assert redelivered.body["duplicate"] is True and redelivered.body["steered"]["offset"] == 1
    finally:
        stack.model.hold_when = lambda sid, n: False
        stack.model.release(sid)
    assert stack.wait_finished(sid)["status"] == "completed"
    last = stack.model.requests_of(sid)[-1]
    assert user_texts(last).count(said) == 1
    journal = stack.journal(sid)
    assert [e["type"] for e in journal] == ["accepted", "delivered"]
    assert sessions_with_goal(stack, f"Fix #{issue.number}:") == [sid]


def polled_once_more(stack: Stack, github: FakeGitHub, since: float) -> bool:
    return any(r.at > since for r in github.polls())


def test_a_poll_finds_a_labelled_issue_and_a_kill_9_of_everything_starts_no_second_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    github = FakeGitHub()
    stacked = trigger_stack(tmp_path_factory.mktemp("triggers-kill"), github)
    stack = next(stacked)
    try:
        issue = github.open_issue("Polled bug", labels=["poll-me"])
        wait_until(lambda: sessions_with_goal(stack, "Polled #"), "the polled session", POLL_INTERVAL + 20)
        [sid] = sessions_with_goal(stack, "Polled #")
        assert stack.record(sid)["goal"] == f"Polled #{issue.number}: Polled bug"
        assert stack.redis_server is not None and stack.client is not None
        for proc in stack.procs:  # kill -9 of every WorkTrain process, and of Redis
            proc.kill_tree()
        stack.redis_server.kill()
        restarted_at = time.time()
        stack.redis_server = RedisServer(
            stack.redis_server.data_dir, port=stack.redis_server.port, appendfsync="always"
        )
        stack.redis_server.start()
        stack.start_tiers(workers=1, processes=1)
        wait_until(
            lambda: polled_once_more(stack, github, restarted_at),
            "a poll after the restart",
            POLL_INTERVAL + 20,
        )
        time.sleep(1.0)  # what that poll fires lands within it
        assert sessions_with_goal(stack, "Polled #") == [sid]
        state = json.loads(json.dumps(stack.http("GET", "/api/v2/triggers/gh-poll").body["data"]["state"]))
        assert state["sessionsStarted"] == 1 and state["lastPollResult"] in ("changed", "not_modified")
    finally:
        next(stacked, None)
        github.close()


# Over 30 s (about 35 s on 2 quiet cores): a stack of its own with a second host's worker
# tier, then the poll that finds the issue and two more poll intervals watched, since "one
# poller" is only seen as the gaps between the polls the fake GitHub received.
def test_two_hosts_polling_one_trigger_make_one_poller_and_one_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    github = FakeGitHub()
    stacked = trigger_stack(tmp_path_factory.mktemp("triggers-two"), github)
    stack = next(stacked)
    try:
        stack.start_worker("worker2", 1)  # a second host's worker tier on the same Redis
        issue = github.open_issue("Two hosts", labels=["poll-me"])
        wait_until(lambda: sessions_with_goal(stack, "Polled #"), "the polled session", POLL_INTERVAL + 20)
        watched_from = time.time()
        time.sleep(2 * POLL_INTERVAL + 2)
        polls = sorted(r.at for r in github.polls() if r.at >= watched_from - POLL_INTERVAL)
        gaps = [b - a for a, b in itertools.pairwise(polls)]
        assert polls and all(gap > POLL_INTERVAL / 2 for gap in gaps), (polls, gaps)  # one poller
        assert sessions_with_goal(stack, "Polled #") == sessions_with_goal(stack, f"Polled #{issue.number}:")
        assert len(sessions_with_goal(stack, "Polled #")) == 1
        holder = stack.http("GET", "/api/v2/triggers/gh-poll").body["data"]["state"]["poller"]
        assert holder, "a poller holds the lease"
    finally:
        next(stacked, None)
        github.close()


def test_no_process_holds_a_trigger_secret_in_its_environment(stack: Stack) -> None:
    for proc in stack.procs:
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert SECRET.encode() not in environ and GH_TOKEN.encode() not in environ, proc.name
        log = proc.log(100_000)
        assert SECRET not in log and GH_TOKEN not in log


def answer_of(stack: Stack, path: str) -> Any:
    return stack.http("GET", path).body


def test_worktrain_triggers_lists_them_and_their_fires(stack: Stack, github: FakeGitHub) -> None:
    from click.testing import CliRunner

    from cli.main import main
    from tests.crash.harness import TOKEN

    issue = github.open_issue("Listed", labels=["agent"])
    sid = deliver(hook_url(stack), "issues", github.issues_labeled(issue, "agent"), SECRET).body["sessionId"]
    env = {"WORKTRAIN_URL": stack.url, "WORKTRAIN_API_TOKEN": TOKEN}
    listed = CliRunner().invoke(main, ["triggers"], env=env)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert any(
        line.startswith("gh-webhook  github/webhook  issues.labeled,issue_comment.created") for line in lines
    )
    assert any(line.startswith("gh-poll  github/poll  issues") and "polled" in line for line in lines)
    fires = CliRunner().invoke(main, ["triggers", "gh-webhook", "--fires"], env=env)
    assert fires.exit_code == 0 and f"github:acme/app#{issue.number}  started  {sid}" in fires.stdout
    as_json = CliRunner().invoke(main, ["triggers", "gh-webhook", "--json"], env=env)
    assert json.loads(as_json.stdout)["fires"][0]["sessionId"] == sid
    unknown = CliRunner().invoke(main, ["triggers", "no-such"], env=env)
    assert unknown.exit_code == 5
    assert SECRET not in listed.output + fires.output + as_json.output


def test_metrics_count_fires_by_trigger_and_result(stack: Stack) -> None:
    import urllib.request

    from tests.crash.harness import TOKEN

    def scrape() -> str:
        request = urllib.request.Request(f"{stack.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(response.read().decode())

    wait_until(
        lambda: 'worktrain_trigger_fires_total{result="started",trigger="gh-webhook"}' in scrape(),
        "fires",
        10,
    )
    text = scrape()
    assert "worktrain_trigger_polls_total{result=" in text and 'trigger="gh-poll"' in text
    assert 'worktrain_trigger_requests_total{status="200",trigger="gh-poll"}' in text
