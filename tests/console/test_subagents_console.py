"""The console shows a session tree (parent <-> child links), signals in the activity, and a
pending question as a banner with a reply box that answers it (README's Sub-agents and questions). A stack of
its own: the fake model's `coord` rule (daemon/fakemodel/coord.py) makes the parent spawn a
child that asks a question."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.console.conftest import Browser, ConsoleStack, expect, open_console, start_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def coord(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    running = start_stack(
        tmp_path_factory.mktemp("console-subagents"),
        model_args=("--rule", "coord"),
        extra_env={"WORKTRAIN_IDLE_WAIT_SECONDS": "60"},
    )
    yield running
    running.stop()


def fake(**wants: object) -> str:
    return "fake:" + json.dumps(wants)


def test_the_tree_links_both_ways_and_the_banner_answers_the_childs_question(
    browser: Browser, coord: ConsoleStack
) -> None:
    child_goal = fake(ask="Which colour should the button be?", signal="halfway there")
    parent = coord.dispatch(fake(spawn=[{"workflowId": "two-step", "goal": child_goal}], single=True))
    tab = open_console(browser, coord.url, coord.token)
    try:
        page = tab.goto(f"/sessions/{parent}")
        children = page.get_by_role("list", name="Children")
        link = children.get_by_role("link")
        expect(link).to_have_count(1)
        child = link.inner_text()
        assert child.startswith("sess_")
        link.click()  # to the child's page
        expect(page.get_by_role("link", name=parent)).to_be_visible()  # and back: its parent
        banner = page.get_by_role("region", name="Question from the agent")
        expect(banner).to_contain_text("Which colour should the button be?")
        activity = page.locator(".session-activity")
        expect(activity).to_contain_text("Question")
        banner.get_by_role("textbox", name="Reply").fill("Teal, like the logo.")
        banner.get_by_role("button", name="Send reply").click()
        expect(banner).to_be_hidden()
        assert coord.wait_status(child, "completed", "failed")["status"] == "completed"
        assert coord.wait_status(parent, "completed", "failed")["status"] == "completed"
        replied = [r for r in coord.model_requests() if "Teal, like the logo." in json.dumps(r["messages"])]
        assert replied, "the reply reached the child's agent"
        page.get_by_role("link", name=parent).click()
        expect(page.get_by_role("list", name="Children").get_by_role("link", name=child)).to_be_visible()
        tab.check_requests(coord.token)
    finally:
        tab.context.close()
