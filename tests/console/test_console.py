"""The console in a real Chromium against real processes: watch, steer, dispatch, cancel.

Each test drives the page the way a person would (labels, roles, keys) and checks what the
server then holds, so a page that only looks right fails.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.console.conftest import Console, ConsoleStack, Route, expect
from tests.e2e.test_steer_e2e import wait_until

pytestmark = pytest.mark.e2e


def steers_row(console: Console, offset: int) -> object:
    table = console.page.get_by_role("table", name="Steers")
    return table.locator(f'tbody tr[data-offset="{offset}"]')


def test_find_a_live_session_in_the_list_and_open_it(console: Console, held: ConsoleStack) -> None:
    page = console.goto("/")
    table = page.get_by_role("table", name="Sessions")
    expect(table).to_be_visible()
    console.mark()
    session_id = held.dispatch()  # after the page loaded: it must appear by itself
    row = table.get_by_role("row").filter(has_text=session_id)
    expect(row).to_contain_text("running")
    expect(row).to_contain_text("two-step")
    expect(row.locator("td").nth(4)).to_have_text("1")  # the live turn
    expect(row.locator("td").nth(5)).to_have_text("1/2")  # step i/n
    expect(page.get_by_role("button", name=re.compile(r"^running \d+$"))).to_be_visible()

    page.get_by_label("Status").select_option("completed")
    expect(row).to_have_count(0)
    page.get_by_label("Status").select_option("running")
    expect(row).to_be_visible()
    assert "status=running" in page.url

    row.get_by_role("link", name=session_id).click()
    expect(page).to_have_url(f"{held.url}/sessions/{session_id}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(session_id)
    expect(page.locator(".record .field-step")).to_have_text("1/2 · Look around")
    assert not console.reloaded(), "the page was reloaded"


def test_steer_from_the_page_pending_then_delivered(console: Console, held: ConsoleStack) -> None:
    session_id = held.dispatch_held()
    page = console.goto(f"/sessions/{session_id}")
    expect(page.get_by_text("live turn: 1")).to_be_visible()
    console.mark()
    send = page.get_by_role("button", name="Send steer")
    before = send.bounding_box()

    page.get_by_role("textbox", name="Steer").fill("Also look at the tests folder, please.")
    page.get_by_label("Expected turn").fill("1")
    send.click()
    outcome = page.get_by_role("status", name="Steer outcome")
    expect(outcome).to_have_text("accepted: offset 1")
    row = steers_row(console, 1)
    expect(row).to_contain_text("pending")
    expect(row).to_contain_text("Also look at the tests folder, please.")
    expect(row.get_by_role("button", name="Retract")).to_be_visible()
    expect(page.get_by_role("textbox", name="Steer")).to_have_value("")

    held.release()
    expect(row.locator("td").nth(1)).to_have_text("delivered (turn 2)")
    expect(row.get_by_role("button", name="Retract")).to_be_hidden()
    activity = page.get_by_role("log", name="Activity")
    expect(activity).to_contain_text("Steer delivered #1 in turn 2")
    expect(page.locator(".record .field-status")).to_have_text("completed")
    expect(activity).to_contain_text("Session ended completed: workflow_complete")
    assert not console.reloaded(), "the page was reloaded"
    # What the page said is what happened: the model's turn-2 request carried the steer.
    last = held.model_requests()[-1]["messages"][-1]["content"][-1]["text"]
    assert last.endswith("Also look at the tests folder, please.")
    # Nothing moved while the session's events streamed in.
    assert send.bounding_box() == before


def test_a_stale_expected_turn_shows_its_code_and_sentence(console: Console, held: ConsoleStack) -> None:
    session_id = held.dispatch_held()
    page = console.goto(f"/sessions/{session_id}")
    expect(page.get_by_text("live turn: 1")).to_be_visible()
    # By keyboard only. The first Tab stop skips to the content; then type, Tab to
    # "Expected turn", past "Interrupt the live turn" to "Send steer", Enter.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.get_by_role("textbox", name="Steer").focus()
    page.keyboard.type("This one names the wrong turn.")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Expected turn")).to_be_focused()
    page.keyboard.type("7")
    page.keyboard.press("Tab")
    expect(page.get_by_role("checkbox", name="Interrupt the live turn")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Send steer")).to_be_focused()
    page.keyboard.press("Enter")
    outcome = page.get_by_role("status", name="Steer outcome")
    expect(outcome).to_have_text("stale_turn: expectedTurnId differs from the session's live turn.")
    expect(outcome).to_have_class(re.compile(r"\berror\b"))
    expect(page.get_by_role("textbox", name="Steer")).to_have_value("This one names the wrong turn.")
    assert held.api("GET", f"/sessions/{session_id}/steers")[1]["data"]["steers"] == []

    # Ctrl+Enter sends from the textbox; an empty "Expected turn" means any turn.
    page.get_by_label("Expected turn").fill("")
    page.get_by_role("textbox", name="Steer").press("Control+Enter")
    expect(outcome).to_have_text("accepted: offset 1")


def test_dispatch_from_the_page_opens_the_new_session(console: Console, stack: ConsoleStack) -> None:
    page = console.goto("/dispatch")
    page.get_by_label("Workflow").select_option("two-step")
    page.get_by_label("Goal").fill("Map the tiny workspace")
    page.get_by_label("Workspace").fill("relative/path")
    page.get_by_role("button", name="Dispatch").click()
    outcome = page.get_by_role("status", name="Dispatch outcome")
    expect(outcome).to_have_text("invalid_request: workspacePath is required and must be an absolute path.")

    console.mark()
    page.get_by_label("Workspace").fill(str(stack.tmp / "workspace"))
    page.get_by_role("button", name="Dispatch").click()
    expect(page).to_have_url(re.compile(r"/sessions/sess_[0-9A-HJKMNP-TV-Z]{26}$"))
    session_id = page.url.rsplit("/", 1)[1]
    expect(page.get_by_role("heading", level=1)).to_contain_text(session_id)
    assert not console.reloaded(), "the page was reloaded"
    record = stack.session(session_id)
    assert (record["workflowId"], record["goal"]) == ("two-step", "Map the tiny workspace")
    expect(page.locator(".record .field-status")).to_have_text("completed")
    expect(page.locator(".record .field-outcome")).to_contain_text("workflow_complete")
    expect(page.get_by_role("log", name="Activity")).to_contain_text("Issue info self_correction")


def test_cancel_asks_first_then_cancels(console: Console, held: ConsoleStack) -> None:
    session_id = held.dispatch_held()
    page = console.goto(f"/sessions/{session_id}")
    cancel = page.get_by_role("button", name="Cancel session")
    dialog = page.get_by_role("dialog", name="Cancel this session?")

    cancel.click()
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    cancel.click()
    dialog.get_by_role("button", name="Keep it running").click()
    expect(dialog).to_be_hidden()
    assert held.session(session_id)["cancelRequested"] is False

    cancel.click()
    dialog.get_by_role("button", name="Yes, cancel it").click()
    expect(page.get_by_role("status", name="Cancel outcome")).to_have_text(
        "cancel_requested: the agent stops within seconds (the live turn is cut short)."
    )
    assert held.session(session_id)["cancelRequested"] is True
    # issue 33: as the dialog says, the cut is now, not at a turn boundary: the model call
    # is still held by the fake model (never released here) and the session ends anyway
    expect(page.locator(".record .field-status")).to_have_text("cancelled")
    activity = page.get_by_role("log", name="Activity")
    expect(activity).to_contain_text("Interrupted turn 1 (the cancel cut it short)")
    expect(activity).not_to_contain_text("a steer cut it short")
    expect(cancel).to_be_disabled()
    expect(page.get_by_role("button", name="Send steer")).to_be_disabled()
    assert held.wait_status(session_id, "cancelled")["outcome"] == "cancelled"


def test_issues_newest_first_with_filters(console: Console, stack: ConsoleStack) -> None:
    first, second = stack.dispatch(), stack.dispatch()
    for session_id in (first, second):
        stack.wait_status(session_id, "completed")
    page = console.goto("/issues")
    table = page.get_by_role("table", name="Issues")
    expect(table.locator("tbody tr").filter(has_text=second)).to_have_count(1)
    rows = table.locator("tbody tr")
    ids = [rows.nth(i).get_attribute("data-id") or "" for i in range(rows.count())]
    assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-")), reverse=True)
    expect(rows.first.locator(".badge")).to_have_text("info")

    page.get_by_label("Session").fill(first)
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(first)
    page.get_by_label("Severity").select_option("error")
    expect(rows).to_have_count(0)
    expect(page.get_by_text("No issues match the filter.")).to_be_visible()
    page.get_by_label("Severity").select_option("info")
    expect(rows).to_have_count(1)

    # Live: a new session's issue arrives without a reload, at the top.
    console.mark()
    page.get_by_label("Session").fill("")
    third = stack.dispatch()
    expect(rows.first).to_contain_text(third)
    assert not console.reloaded()


def test_retract_against_the_real_route(console: Console, held: ConsoleStack) -> None:
    """The Retract button against SPEC 3.7's route: a pending steer is retracted (the model
    never sees it); one that a turn end has taken since the page last heard is refused with
    409 steer_taken, said in the outcome, and the row then shows what became of it. The
    session's event stream is held back (the page is left stale), so that the second click
    meets a steer the worker has already taken; turn 2's call is held, so the session is
    still live (a finished one answers 404 session_finished to any retract)."""
    session_id = held.dispatch_held()
    for text in ("first, to be retracted", "second, already taken"):
        assert held.api("POST", f"/sessions/{session_id}/steer", {"text": text})[0] == 200
    page = console.page
    stale: list[Route] = []
    page.route(re.compile(r"/api/v2/sessions/[^/]+/events"), lambda route: stale.append(route))  # unanswered
    console.goto(f"/sessions/{session_id}")
    outcome = page.get_by_role("status", name="Steer outcome")
    expect(steers_row(console, 2)).to_contain_text("pending")

    steers_row(console, 1).get_by_role("button", name="Retract").click()
    expect(outcome).to_have_text("retracted: offset 1")
    expect(steers_row(console, 1).locator("td").nth(1)).to_have_text("retracted")
    expect(steers_row(console, 1).get_by_role("button", name="Retract")).to_be_hidden()

    calls = len(held.model_requests())  # turn 1's, held
    held.release(keep_holding=True)  # turn 1 ends: its drain takes steer 2, turn 2 receives it
    status, body = held.api("GET", f"/sessions/{session_id}/steers/2?wait=30")
    assert (status, body["data"]["state"]) == (200, "delivered")
    wait_until(lambda: len(held.model_requests()) > calls, "turn 2's call, held", procs=held.procs)
    assert held.session(session_id)["status"] == "running"
    expect(steers_row(console, 2)).to_contain_text("pending")  # the page has not heard yet
    steers_row(console, 2).get_by_role("button", name="Retract").click()
    expect(outcome).to_have_text("steer_taken: The steer was already delivered as it was.")
    expect(steers_row(console, 2).locator("td").nth(1)).to_have_text("delivered (turn 2)")

    deletes = [r for r in console.requests if r.method == "DELETE"]
    assert [r.url for r in deletes] == [f"{held.url}/api/v2/sessions/{session_id}/steers/{n}" for n in (1, 2)]
    assert all(r.headers.get("authorization") == f"Bearer {held.token}" for r in deletes)
    # What the page said is what happened: the model saw steer 2 and never steer 1.
    sent = json.dumps(held.model_requests()[1:])
    assert "second, already taken" in sent and "first, to be retracted" not in sent
    journal = held.api("GET", f"/sessions/{session_id}/steers")[1]["data"]["steers"]
    assert [(s["offset"], s["state"]) for s in journal] == [(1, "retracted"), (2, "delivered")]
    for route in stale:
        route.abort()


def test_interrupt_from_the_page_cuts_the_held_call_short(console: Console, held: ConsoleStack) -> None:
    """ "Interrupt the live turn" sends mode interrupt: while turn 1's call is still held, the
    worker already sends the next request with the steer, and the activity says so."""
    session_id = held.dispatch_held()
    page = console.goto(f"/sessions/{session_id}")
    expect(page.get_by_text("live turn: 1")).to_be_visible()
    before = len(held.model_requests())
    page.get_by_role("textbox", name="Steer").fill("Stop and take the other approach.")
    page.get_by_role("checkbox", name="Interrupt the live turn").check()
    page.get_by_role("button", name="Send steer").click()
    expect(page.get_by_role("status", name="Steer outcome")).to_have_text("accepted: offset 1")
    expect(page.get_by_role("checkbox", name="Interrupt the live turn")).not_to_be_checked()
    activity = page.get_by_role("log", name="Activity")
    expect(activity).to_contain_text("Interrupted turn 1")
    # the held call is still open, and the worker has already asked again, with the steer
    wait_until(
        lambda: len(held.model_requests()) > before, "the request after the interrupt", procs=held.procs
    )
    assert "Stop and take the other approach." in json.dumps(held.model_requests()[-1]["messages"][-1])
    held.release()
    expect(steers_row(console, 1).locator("td").nth(1)).to_have_text("delivered (turn 2)")
