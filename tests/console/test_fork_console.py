"""The conversation view's "Fork from here" (README's "Fork a session", SPEC 3.12) in a real Chromium
against real processes: on turn 2 of a finished three-step session, with a steer, it opens
the fork's page; the fork carries on after turn 2 — judged by what the fake model received:
one request for the fork, its turn 3, whose last message delivers the steer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import Browser, ConsoleStack, expect, open_console, start_stack
from tests.e2e.test_steer_e2e import FIXTURE_WORKFLOWS

pytestmark = pytest.mark.e2e

STEER = "Fork steer: look at the README before the listing."
THREE_STEP = {
    "id": "three-step",
    "name": "Three steps",
    "description": "Three steps, one turn each with the demo model.",
    "version": "1.0.0",
    "steps": [
        {"id": f"s{i}", "title": f"Step {i}", "prompt": f"Step {i} of 3: look and move on."}
        for i in (1, 2, 3)
    ],
}


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    tmp = tmp_path_factory.mktemp("fork-console")
    workflows = tmp / "workflows"
    workflows.mkdir()
    (workflows / "two-step.json").write_text((FIXTURE_WORKFLOWS / "two-step.json").read_text())
    (workflows / "three-step.json").write_text(json.dumps(THREE_STEP))
    stack = start_stack(tmp / "stack", extra_env={"WORKTRAIN_WORKFLOWS_DIR": str(workflows)})
    yield stack
    stack.stop()


def user_text(request: dict[str, object]) -> str:
    last = request["messages"][-1]  # type: ignore[index]
    return " ".join(b.get("text", "") for b in last["content"] if isinstance(b, dict))


def test_fork_from_turn_2_opens_the_forks_page(
    browser: Browser, three_steps: ConsoleStack, shots_dir: Path
) -> None:
    stack = three_steps
    source = stack.dispatch("Walk three steps", workflow="three-step")
    stack.wait_status(source, "completed")
    tab = open_console(browser, stack.url, stack.token, viewport={"width": 1280, "height": 1000})
    try:
        page = tab.goto(f"/sessions/{source}")
        card = page.get_by_role("region", name="Conversation")
        turn2 = card.locator('.conv-turn[data-turn="2"]')
        expect(turn2).to_contain_text("Turn 2")
        expect(card.get_by_role("button", name=re.compile(r"^Fork from turn \d+$"))).to_have_count(3)
        turn2.get_by_role("button", name="Fork from turn 2").click()
        turn2.get_by_role("textbox", name="Steer for the fork from turn 2").fill(STEER)
        turn2.screenshot(path=str(shots_dir / "console-fork-form.png"))
        turn2.get_by_role("button", name="Fork the session from turn 2").click()
        expect(page).not_to_have_url(re.compile(f"/sessions/{source}$"))
        fork = page.url.rsplit("/", 1)[-1]
        assert fork.startswith("sess_") and fork != source
        expect(page.locator("h1 .session-id")).to_have_text(fork)
        expect(page.locator(".session-activity")).to_contain_text(f"Forked from {source} after turn 2")
        record = stack.session(fork)
        assert record["forkOf"]["sessionId"] == source and record["forkOf"]["turn"] == 2
        stack.wait_status(fork, "completed")
        sent = [r for r in stack.model_requests() if fork in json.dumps(r.get("system", ""))]
        print(f"the fork's model requests: {len(sent)}; its first ends with: {user_text(sent[0])[-200:]!r}")
        assert len(sent) == 1 and STEER in user_text(sent[0])  # its turn 3 only, with the steer
        assert sum(1 for m in sent[0]["messages"] if m["role"] == "assistant") == 2  # turns 1-2, copied
        page.screenshot(path=str(shots_dir / "console-fork.png"))
        tab.check_requests(stack.token)
    finally:
        tab.context.close()
