"""The console's Triggers page in a real Chromium against real processes (README's Triggers, Console):
the file's triggers with their state; after a signed webhook, the trigger's fire (event, key,
result) and a link to the session it started; no secret on the page; no request elsewhere."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import Browser, ConsoleStack, expect, open_console, start_stack
from tests.fakes.github import FakeGitHub, deliver

pytestmark = pytest.mark.e2e

SECRET = "console-webhook-secret-2d9f"


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def triggered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    tmp = tmp_path_factory.mktemp("console-triggers")
    path = tmp / "triggers.yml"
    path.write_text(
        textwrap.dedent(f"""\
    - id: fix-labelled-issues
      source: github
      mode: webhook
      events: [issues.labeled]
      filter: {{label: agent}}
      secretEnv: TEST_CONSOLE_GH_SECRET
      workflowId: two-step
      goal: "Fix #{{{{ issue.number }}}}: {{{{ issue.title }}}}"
      workspacePath: {tmp / "workspace"}
    """)
    )
    env = {"WORKTRAIN_TRIGGERS_FILE": str(path), "TEST_CONSOLE_GH_SECRET": SECRET}
    running = start_stack(tmp, worker=False, extra_env=env)
    yield running
    running.stop()


def test_the_triggers_page_shows_a_trigger_its_fire_and_the_session(
    browser: Browser, triggered: ConsoleStack, github: FakeGitHub
) -> None:
    issue = github.open_issue("Crash on save", labels=["agent"])
    fired = deliver(f"{triggered.url}/api/v2/triggers/fix-labelled-issues", "issues",
                    github.issues_labeled(issue, "agent"), SECRET)  # fmt: skip
    assert fired.status == 202, fired
    tab = open_console(browser, triggered.url, triggered.token)
    try:
        page = tab.goto("/triggers")
        expect(page.get_by_role("heading", name="Triggers", level=1)).to_be_visible()
        row = page.get_by_role("row").filter(has_text="fix-labelled-issues")
        expect(row).to_contain_text("github webhook")
        expect(row).to_contain_text("issues.labeled")
        expect(row).to_contain_text("started")
        row.get_by_role("link", name="fix-labelled-issues").click()
        fires = page.get_by_role("table", name="Fires of fix-labelled-issues")
        expect(fires).to_contain_text("issues.labeled")
        expect(fires).to_contain_text(f"github:acme/app#{issue.number}")
        link = fires.get_by_role("link", name=fired.body["sessionId"])
        expect(link).to_be_visible()
        expect(page.locator("main")).to_contain_text("TEST_CONSOLE_GH_SECRET")  # the variable's name ...
        assert SECRET not in page.content()  # ... never its value
        link.click()
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        assert page.url.endswith(f"/sessions/{fired.body['sessionId']}")
        tab.check_requests(triggered.token)
        listed = json.dumps(triggered.api("GET", "/triggers")[1])
        assert SECRET not in listed
    finally:
        tab.context.close()


def test_with_no_triggers_file_the_page_says_how_to_add_one(browser: Browser, tmp_path: Path) -> None:
    bare = start_stack(tmp_path, worker=False)
    tab = open_console(browser, bare.url, bare.token)
    try:
        page = tab.goto("/triggers")
        expect(page.get_by_text("No triggers.")).to_be_visible()
        tab.check_requests(bare.token)
    finally:
        tab.context.close()
        bare.stop()
