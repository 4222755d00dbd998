"""Polls (README's Triggers) against the loopback fakes of GitHub and GitLab, over real Redis and
fakeredis: a trigger's loop ticked by hand (no thread, no timing).

A new labelled issue is one session; once the cursor has moved to it (one more request, the
new `since` URL's first answer), a poll when nothing changed is one conditional request
answered 304 (no rate limit spent) and starts nothing; an issue updated later is fired for
its new version only; 150 items are read in two pages by `Link`; a low rate-limit budget
stops requests until the reset; a 5xx or a timeout keeps the cursor and starts nothing; a
second process holding no lease polls nothing; a new holder (a restart) starts nothing
again; GitLab's merge requests page by `X-Next-Page`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from daemon.bus.fleet.triggers import TriggerStore
from daemon.bus.keys import Keys
from daemon.bus.session.steerbus import SteerBus
from daemon.triggers import polling
from daemon.triggers.runner import TriggerLoop
from daemon.triggers.setup import build_firing
from daemon.workflows import load_catalog
from tests.fakes.github import TOKEN as GH_TOKEN
from tests.fakes.github import FakeGitHub
from tests.fakes.gitlab import TOKEN as GL_TOKEN
from tests.fakes.gitlab import FakeGitLab
from tests.triggers.conftest import triggers_from
from tests.web.conftest import FIXTURE_WORKFLOWS, bytes_client, settings_for
from web.jobs import RqJobQueue

pytestmark = pytest.mark.redis  # the tier (tests/tiers.py on the tiers branch)

LEASE_MS = 30_000


def loop_for(client: redis.Redis, tmp: Path, text: str, tokens: dict[str, str]) -> TriggerLoop:
    triggers = triggers_from(text)
    keys = Keys("wt")
    bus = SteerBus(client, keys, retention_seconds=3600)
    catalog = load_catalog(FIXTURE_WORKFLOWS)
    firing = build_firing(settings_for(tmp), bus, RqJobQueue(bytes_client(client)), catalog)
    (trigger,) = list(triggers)
    return TriggerLoop(trigger, firing.store, firing, tokens.get, LEASE_MS)


def github_poll(tmp: Path, api: str, events: str = "[issues]", extra: str = "") -> str:
    return f"""
    - id: poll-issues
      source: github
      mode: poll
      events: {events}
      filter: {{label: agent}}
      tokenEnv: TEST_GH_TOKEN
      apiUrl: {api}
      repo: acme/app
      interval: 60
      workflowId: two-step
      goal: "Fix #{{{{ issue.number }}}}: {{{{ issue.title }}}}"
      workspacePath: {tmp}
      {extra}
    """


def minute_before(stamp: str) -> str:
    """What a poll asks from: the cursor less a minute (daemon/triggers/polling.py OVERLAP_MS)."""
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")) - timedelta(minutes=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def sessions(client: redis.Redis) -> list[str]:
    return [str(s) for s in client.zrange(Keys("wt").sessions, 0, -1)]


def goals(client: redis.Redis) -> list[str]:
    return sorted(str(client.hget(Keys("wt").session(s).record, "goal")) for s in sessions(client))


@pytest.fixture
def gh_loop(redis_client: redis.Redis, tmp_path: Path, github: FakeGitHub) -> TriggerLoop:
    loop = loop_for(redis_client, tmp_path, github_poll(tmp_path, github.url), {"TEST_GH_TOKEN": GH_TOKEN})
    assert loop.holds()
    return loop


def test_a_new_labelled_issue_is_one_session_and_an_unchanged_poll_is_a_free_304(
    redis_client: redis.Redis, github: FakeGitHub, gh_loop: TriggerLoop
) -> None:
    github.open_issue("Not for us", labels=["bug"])
    crash = github.open_issue("Crash on save", labels=["agent"])
    gh_loop.poll()
    assert goals(redis_client) == ["Fix #2: Crash on save"]
    first = github.polls()
    assert len(first) == 1 and first[0].query["labels"] == "agent" and "since" not in first[0].query
    gh_loop.poll()  # the cursor moved: the `since` URL's first answer (and its ETag)
    assert github.polls()[1].query["since"] == minute_before(crash.updated)
    remaining = github.budget.remaining
    gh_loop.poll()
    gh_loop.poll()
    again = github.polls()[2:]
    assert [r.status for r in again] == [304, 304]
    assert all(r.headers.get("if-none-match") for r in again)
    assert github.budget.remaining == remaining  # a 304 costs no rate limit
    assert len(sessions(redis_client)) == 1
    state = gh_loop.store.state("poll-issues")
    assert (
        state.lastPollResult == "not_modified" and state.cursor == crash.updated
    )  # asked from a minute before
    assert state.polls == 4


def test_an_issue_updated_later_fires_its_new_version_only(
    redis_client: redis.Redis, github: FakeGitHub, gh_loop: TriggerLoop
) -> None:
    github.open_issue("First", labels=["agent"])
    gh_loop.poll()
    second = github.open_issue("Second")
    gh_loop.poll()
    assert len(sessions(redis_client)) == 1  # not labelled yet
    github.label(second.number, "agent")
    cursor = str(gh_loop.store.state("poll-issues").cursor)
    gh_loop.poll()
    assert goals(redis_client) == ["Fix #1: First", "Fix #2: Second"]
    assert github.polls()[-1].query["since"] == minute_before(cursor)


def test_150_items_are_read_in_two_pages_by_link(
    redis_client: redis.Redis, github: FakeGitHub, gh_loop: TriggerLoop
) -> None:
    for n in range(150):
        github.open_issue(f"Issue {n}", labels=["agent"])
    gh_loop.poll()
    pages = github.polls()
    assert [r.query.get("page", "1") for r in pages] == ["1", "2"]
    assert len(sessions(redis_client)) == 150
    gh_loop.poll()
    assert len(sessions(redis_client)) == 150


def test_a_low_budget_stops_requests_until_the_reset(
    redis_client: redis.Redis, github: FakeGitHub, gh_loop: TriggerLoop
) -> None:
    github.open_issue("One", labels=["agent"])
    github.budget.set(remaining=5, reset_in=3600)
    gh_loop.poll()
    assert len(sessions(redis_client)) == 1  # the answer that said "low" is still read
    asked = len(github.polls())
    gh_loop.poll()
    gh_loop.poll()
    assert len(github.polls()) == asked  # no request until the reset
    state = gh_loop.store.state("poll-issues")
    assert state.lastPollResult == "rate_limited" and (state.pausedUntilMs or 0) >= github.budget.reset * 1000


def test_an_exhausted_budget_403_pauses_until_the_reset(
    redis_client: redis.Redis, github: FakeGitHub, gh_loop: TriggerLoop
) -> None:
    github.open_issue("One", labels=["agent"])
    github.budget.set(remaining=0, reset_in=600)
    gh_loop.poll()
    assert github.polls()[-1].status == 403
    assert sessions(redis_client) == []
    state = gh_loop.store.state("poll-issues")
    assert state.lastPollResult == "rate_limited" and state.pausedUntilMs == github.budget.reset * 1000


def test_a_5xx_keeps_the_cursor_and_the_next_poll_catches_up(
    redis_client: redis.Redis, github: FakeGitHub, gh_loop: TriggerLoop
) -> None:
    github.open_issue("One", labels=["agent"])
    gh_loop.poll()
    cursor = gh_loop.store.state("poll-issues").cursor
    github.open_issue("Two", labels=["agent"])
    github.fail("GET", "/repos/acme/app/issues", 502)
    gh_loop.poll()
    state = gh_loop.store.state("poll-issues")
    assert state.lastPollResult == "error" and "502" in (state.lastError or "")
    assert state.cursor == cursor and len(sessions(redis_client)) == 1
    gh_loop.poll()
    assert goals(redis_client) == ["Fix #1: One", "Fix #2: Two"]


def test_a_timeout_is_an_error_and_starts_nothing(
    redis_client: redis.Redis, github: FakeGitHub, gh_loop: TriggerLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(polling, "REQUEST_TIMEOUT_SECONDS", 0.3)
    github.open_issue("Slow", labels=["agent"])
    github.hang("GET", "/repos/acme/app/issues", 1.5)
    gh_loop.poll()
    state = gh_loop.store.state("poll-issues")
    assert state.lastPollResult == "error" and "timeout" in (state.lastError or "")
    assert sessions(redis_client) == []
    gh_loop.poll()
    assert len(sessions(redis_client)) == 1


def test_a_second_process_without_the_lease_polls_nothing_and_a_restart_starts_nothing_again(
    redis_client: redis.Redis, tmp_path: Path, github: FakeGitHub, gh_loop: TriggerLoop
) -> None:
    github.open_issue("One", labels=["agent"])
    other = loop_for(redis_client, tmp_path, github_poll(tmp_path, github.url), {"TEST_GH_TOKEN": GH_TOKEN})
    gh_loop.tick()
    redis_client.hset(Keys("wt").trigger("poll-issues").state, "nextPollMs", 0)  # due again: only the lease
    other.tick()  # stops the second process
    other.tick()
    assert len(github.polls()) == 1 and len(sessions(redis_client)) == 1
    gh_loop.poll()  # the cursor's URL answered once: its ETag is kept
    assert len(sessions(redis_client)) == 1
    # the holder dies (its lease runs out: here, deleted) and another takes over, as after a restart
    redis_client.delete(Keys("wt").trigger("poll-issues").poller)
    redis_client.hset(Keys("wt").trigger("poll-issues").state, "nextPollMs", 0)
    other.tick()
    assert other.holds() and not gh_loop.holds()
    assert github.polls()[-1].status == 304  # the ETag survived in Redis
    assert len(sessions(redis_client)) == 1


def test_a_poll_without_its_token_says_so_and_requests_nothing(
    redis_client: redis.Redis, tmp_path: Path, github: FakeGitHub
) -> None:
    loop = loop_for(redis_client, tmp_path, github_poll(tmp_path, github.url), {})
    assert loop.holds()
    loop.poll()
    assert github.polls() == []
    assert "TEST_GH_TOKEN is not set" in (loop.store.state("poll-issues").lastError or "")


def test_pull_requests_are_read_newest_first_down_to_the_cursor(
    redis_client: redis.Redis, tmp_path: Path, github: FakeGitHub
) -> None:
    text = github_poll(tmp_path, github.url, "[pull_request]").replace(
        '"Fix #{{ issue.number }}: {{ issue.title }}"', '"Review #{{ pull_request.number }}"'
    )
    loop = loop_for(redis_client, tmp_path, text, {"TEST_GH_TOKEN": GH_TOKEN})
    assert loop.holds()
    github.open_issue("Feature", labels=["agent"], pull=True)
    github.open_issue("An issue, not a pull request", labels=["agent"])
    loop.poll()
    assert goals(redis_client) == ["Review #1"]
    assert github.polls()[0].query["direction"] == "desc"
    github.open_issue("Another", labels=["agent"], pull=True)
    loop.poll()
    assert goals(redis_client) == ["Review #1", "Review #3"]


def test_gitlab_merge_requests_page_by_x_next_page(
    redis_client: redis.Redis, tmp_path: Path, gitlab: FakeGitLab
) -> None:
    text = f"""
    - id: poll-mrs
      source: gitlab
      mode: poll
      events: [merge_request]
      tokenEnv: TEST_GL_TOKEN
      apiUrl: {gitlab.url}/api/v4
      repo: acme/app
      workflowId: two-step
      goal: "Review !{{{{ merge_request.iid }}}}: {{{{ merge_request.title }}}}"
      workspacePath: {tmp_path}
    """
    loop = loop_for(redis_client, tmp_path, text, {"TEST_GL_TOKEN": GL_TOKEN})
    assert loop.holds()
    for n in range(120):
        gitlab.open("merge_request", f"MR {n}")
    loop.poll()
    asked = gitlab.requests("GET")
    assert [r.query.get("page", "1") for r in asked] == ["1", "2"]
    assert len(sessions(redis_client)) == 120
    gitlab.open("merge_request", "One more")
    loop.poll()
    assert "updated_after" in gitlab.requests("GET")[-1].query
    assert len(sessions(redis_client)) == 121
    assert TriggerStore(redis_client, Keys("wt")).state("poll-mrs").lastPollResult == "changed"
