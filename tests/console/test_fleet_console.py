"""The console's fleet and operator parts in a real Chromium against real processes (README's Console,
docs/operations.md): the Fleet page (live), the sessions list's goal and search, and on a session's page the
tool results, tokens, an interrupt steer marked as such, "Edit" on a pending steer, "Dispatch
again", and a cancelled end said and coloured as one. (The README's screenshots of the session
and Fleet pages: test_operator_console.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.console.conftest import DESKTOP, Browser, Console, ConsoleStack, expect, open_console

pytestmark = pytest.mark.e2e

# The console's success colour, as the browser computes it.
OK_GREEN = """(() => {
  const probe = document.body.appendChild(document.createElement('span'));
  probe.style.color = 'var(--ok)';
  const colour = getComputedStyle(probe).color;
  probe.remove();
  return colour;
})()"""


def docs_shot(page: object, name: str, shots_dir: Path) -> None:
    """A screenshot of the window's top in the test's folder (look at it)."""
    page.evaluate("window.scrollTo(0, 0)")  # type: ignore[attr-defined]
    page.screenshot(path=str(shots_dir / name), full_page=False)  # type: ignore[attr-defined]


def stat(page: object, label: str) -> object:
    return page.get_by_role("group", name=label).locator(".stat-value")  # type: ignore[attr-defined]


def test_the_fleet_page_shows_the_workers_and_updates_live(
    browser: Browser, held: ConsoleStack, shots_dir: Path
) -> None:
    tab = open_console(browser, held.url, held.token, viewport=DESKTOP)
    try:
        page = tab.goto("/")
        page.get_by_role("navigation", name="Console").get_by_role("link", name="Fleet").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Fleet")
        workers = page.get_by_role("table", name="Workers")
        expect(workers.locator("tbody tr")).to_have_count(2)  # `worker --processes 2`
        expect(workers.locator("tbody tr").first).to_contain_text("/ 16")  # sessions / concurrency
        expect(stat(page, "Workers")).to_have_text("2")
        tab.mark()
        running_before = held.api("GET", "/sessions?status=running")[1]["data"]["totalCount"]
        session_id = held.dispatch_held("Watch the fleet page while this runs")
        steer = {"text": "Fleet steer", "expectedTurnId": 1}
        assert held.api("POST", f"/sessions/{session_id}/steer", steer)[0] == 200
        # live: the running count, the call in flight and the steer arrive without a reload
        running = page.locator('.fleet-status[data-status="running"] b')
        expect(running).to_have_text(str(running_before + 1))
        expect(stat(page, "Model calls in flight")).to_have_text("1")
        expect(stat(page, "Steers / min")).not_to_have_text(re.compile(r"^(0|—)$"))
        expect(workers).to_contain_text("1 / 16")
        assert not tab.reloaded()
        fleet = held.api("GET", "/fleet")[1]["data"]
        assert fleet["modelCalls"]["inFlight"] == 1 and fleet["sessions"]["running"] == running_before + 1
        held.release()
        expect(stat(page, "Model calls in flight")).to_have_text("0")
        delivered = page.get_by_role("group", name="Delivery p50").locator(".stat-note")
        expect(delivered).not_to_have_text("0 delivered")
        expect(stat(page, "Delivery p99")).to_have_text(re.compile(r"^\d+(\.\d)? m?s$"))
        held.wait_status(session_id, "completed")
        held.hold()
        held.dispatch_held("A second session, running while the screenshot is taken")
        expect(stat(page, "Model calls in flight")).to_have_text("1")
        docs_shot(page, "fleet.png", shots_dir)
        tab.check_requests(held.token)
    finally:
        tab.context.close()


def test_the_sessions_list_shows_goals_and_searches(console: Console, stack: ConsoleStack) -> None:
    first = stack.dispatch("Write the release notes for 2.0")
    second = stack.dispatch("Fix the flaky login test")
    page = console.goto("/")
    table = page.get_by_role("table", name="Sessions")
    row = table.locator(f'tbody tr[data-id="{first}"]')
    expect(row.locator("td.col-goal")).to_have_text("Write the release notes for 2.0")
    search = page.get_by_role("searchbox", name="Search")
    search.fill("flaky login")
    expect(row).to_be_hidden()
    expect(table.locator(f'tbody tr[data-id="{second}"]')).to_be_visible()
    search.fill(first[-8:].lower())  # by id, any case
    expect(row).to_be_visible()
    expect(table.locator(f'tbody tr[data-id="{second}"]')).to_be_hidden()
    search.fill("two-step release")  # workflow and goal words together
    expect(row).to_be_visible()
    for session_id in (first, second):
        stack.wait_status(session_id, "completed")


def test_a_session_page_shows_results_tokens_interrupts_edits_and_dispatch_again(
    console: Console, held: ConsoleStack, shots_dir: Path
) -> None:
    session_id = held.dispatch_held("Map the repository and keep notes short")
    interrupt = {"text": "Stop: read the tests first.", "mode": "interrupt"}
    pending = {"text": "Then keep the notes under a page."}
    page = console.goto(f"/sessions/{session_id}")
    table = page.get_by_role("table", name="Steers")
    assert held.api("POST", f"/sessions/{session_id}/steer", interrupt)[0] == 200
    expect(table.locator('tbody tr[data-offset="1"] .mode-interrupt')).to_be_visible()
    activity = page.get_by_role("log", name="Activity")
    expect(activity).to_contain_text("Interrupt steer accepted")
    expect(activity).to_contain_text("interrupted: the next model call starts with the steer")
    expect(activity).not_to_contain_text("waiting for a steer")
    assert held.api("POST", f"/sessions/{session_id}/steer", pending)[0] == 200
    row = table.locator('tbody tr[data-offset="2"]')
    expect(row.locator(".mode-interrupt")).to_be_hidden()

    row.get_by_role("button", name="Edit steer 2").click()
    box = row.get_by_role("textbox", name="New text of steer 2")
    box.fill("Then keep the notes under half a page.")
    row.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status", name="Steer outcome")).to_have_text("edited: offset 2")
    status, body = held.api("GET", f"/sessions/{session_id}/steers/2")
    assert (status, body["data"]["text"], body["data"]["state"]) == (
        200,
        "Then keep the notes under half a page.",
        "pending",
    )
    expect(row.locator(".clamp")).to_have_text("Then keep the notes under half a page.")

    held.release()  # the turns run: tool results and tokens arrive
    expect(activity.locator("details.tool-result").first).to_be_visible()
    activity.locator("details.tool-result summary").first.click()
    expect(activity.locator("details.tool-result pre").first).not_to_be_empty()
    expect(page.locator(".record .field-usage")).to_contain_text(re.compile(r"[1-9][\d,]* out"))
    expect(page.locator(".record .field-retries")).to_have_text("0")
    held.wait_status(session_id, "completed")
    expect(page.locator(".record .field-status")).to_have_text("completed")
    expect(page.locator(".head-status")).to_have_text("completed")  # one badge, nothing after it
    docs_shot(page, "session.png", shots_dir)

    page.get_by_role("link", name="Dispatch again").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Dispatch")
    expect(page.get_by_label("Goal")).to_have_value("Map the repository and keep notes short")
    expect(page.get_by_label("Workflow")).to_have_value("two-step")
    expect(page.get_by_label("Workspace")).to_have_value(str(held.tmp / "workspace"))


def test_a_cancelled_session_is_said_and_shown_as_cancelled(console: Console, held: ConsoleStack) -> None:
    session_id = held.dispatch_held()
    page = console.goto(f"/sessions/{session_id}")
    assert held.api("POST", f"/sessions/{session_id}/cancel")[0] == 202
    held.release()
    held.wait_status(session_id, "cancelled")
    expect(page.get_by_text("The session was cancelled: it takes no more steers.")).to_be_visible()
    ended = page.get_by_role("log", name="Activity").locator("li.kind-session_completed")
    expect(ended).to_have_class(re.compile(r"ended-cancelled"))
    colour = ended.locator(".label").evaluate("(n) => getComputedStyle(n).color")
    assert colour != page.evaluate(OK_GREEN), "a cancelled end is not shown as a success"
