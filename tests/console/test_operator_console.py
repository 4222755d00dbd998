"""The console an operator would choose over the CLI (issue 45; SPEC 3.6 v5), in a real Chromium
against real processes:

1. one turn numbering: after a hand-over (turn 1's call cut short by a stopping worker) the
   conversation, the events, the steer journal and the record agree, and the steer is shown just
   before the turn that read it (before: the conversation counted replies and said "Turn 1" for
   turn 2, the steer drawn above it);
2. the session page leads with the conversation, visible without scrolling at 1280x800, the
   steer box always in view, the record showing model, thinking budget and cost in full;
3. the Fleet page's charts show the hours before the page opened (the fleet's history is kept
   in Redis), time labels read as times, a status has one colour in badges and lines, and the
   workers table is one line a worker;
4. a console link pasted into a tab showing "Sign in" signs in, no reload, no token left in the
   address bar;
8. the sessions list keeps workflow names whole at 1280 px, and on a phone shows each id's tail
   (which every id argument takes back) and the goal.

Screenshots of the session and Fleet pages (light and dark, desktop and phone) go to docs/ when
WORKTRAIN_DOCS_SCREENSHOTS=1 (the README shows them).
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.bus.keys import Keys
from tests.console.conftest import (
    DESKTOP,
    NARROW,
    TOKEN,
    TOKEN_KEY,
    Browser,
    Console,
    ConsoleStack,
    expect,
    open_console,
    start_stack,
)
from tests.e2e.test_steer_e2e import wait_until

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs"
LAYOUTS = [("desktop", DESKTOP, False), ("dark", DESKTOP, True), ("phone", NARROW, False)]
GOAL = "Map this repository: what it is, how it is built and tested, and where to start."
STEER = "Start with the README, then the tests folder."
AGENT = {"model": "claude-sonnet-4-5", "maxOutputTokens": 8192, "thinkingBudgetTokens": 2048}
# The visible cells matching a selector whose text is cut (wider than the cell): their classes
CUT = """(selector) => [...document.querySelectorAll(selector)]
  .filter((c) => c.offsetParent && c.scrollWidth > c.clientWidth + 1)
  .map((c) => c.className || c.textContent)"""


def shot(page: Any, name: str, shots_dir: Path) -> None:
    """A screenshot of the window in the test's folder, and in docs/ when asked."""
    page.screenshot(path=str(shots_dir / name))
    if os.environ.get("WORKTRAIN_DOCS_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS / name))


def worker_env(stack: ConsoleStack, model_url: str) -> dict[str, str]:
    env = {**stack.env, "ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "console-dummy-key"}
    env.pop("WORKTRAIN_API_TOKEN", None)  # workers never get the API token
    return env


def session_events(stack: ConsoleStack, session_id: str) -> list[dict[str, Any]]:
    status, body = stack.api("GET", f"/events?sessionId={session_id}&limit=1000")
    assert status == 200, body
    return list(body["data"]["events"])


# --- 1. one turn numbering ----------------------------------------------------------------------


def test_after_a_hand_over_every_view_numbers_the_turns_alike(browser: Browser, tmp_path: Path) -> None:
    stack = start_stack(tmp_path)
    try:
        stack.hold()
        sid = stack.dispatch_held(GOAL, workflow="explore-and-document")
        assert stack.api("POST", f"/sessions/{sid}/steer", {"text": STEER})[0] == 200
        # the worker stops (a warm shutdown): turn 1's call is cut short, the session handed over
        stopped = next(p for p in stack.procs if p.name == "worker")
        stopped.stop()
        stack.procs.remove(stopped)
        stack.release()
        command = [sys.executable, "-m", "cli", "worker", "--processes", "1"]
        stack.spawn("worker-2", command, worker_env(stack, stack.model_url))
        stack.wait_status(sid, "completed")

        answered = [e["turnId"] for e in session_events(stack, sid) if e["kind"] == "llm_turn_completed"]
        record = stack.session(sid)
        [steer] = stack.api("GET", f"/sessions/{sid}/steers")[1]["data"]["steers"]
        print("replies in the events", answered, "turnCount", record["turnCount"], "steer", steer)
        assert answered[0] == 2 and record["turnCount"] == answered[-1] and steer["deliveredTurnId"] == 2

        tab = open_console(browser, stack.url, stack.token, viewport=DESKTOP)
        try:
            page = tab.goto(f"/sessions/{sid}")
            card = page.get_by_role("region", name="Conversation")
            expect(card.locator("article.conv-turn").first).to_be_attached()
            page.wait_for_timeout(1500)  # (a conversation drawn again would be drawn by now)
            replies = card.locator("article.conv-turn:not(.conv-turn-empty):not(.conv-turn-live)")
            drawn = [int(t) for t in replies.evaluate_all("(ts) => ts.map((t) => t.dataset.turn)")]
            print("replies in the conversation", drawn)
            assert drawn == answered, "the conversation numbers the replies as the events do"
            turns = card.locator("article.conv-turn")
            expect(turns).to_have_count(record["turnCount"])
            shown = [int(t) for t in turns.evaluate_all("(ts) => ts.map((t) => t.dataset.turn)")]
            assert shown == list(range(1, record["turnCount"] + 1)), shown
            expect(turns.first).to_have_class(re.compile("conv-turn-empty"))
            expect(turns.first).to_contain_text("No reply")
            expect(card.locator('article[data-turn="2"] .conv-turn-title')).to_have_text("Turn 2")
            note = card.locator('.conv-steer[data-offset="1"]')
            expect(note.locator(".conv-steer-label")).to_have_text("Steer #1 delivered (turn 2)")
            # just before the turn that read it
            read_by = note.evaluate("(n) => n.closest('.conv-user').nextElementSibling.dataset.turn")
            assert read_by == "2", read_by
            row = page.get_by_role("table", name="Steers").locator('tbody tr[data-offset="1"]')
            expect(row.locator(".col-state")).to_have_text("delivered (turn 2)")
            expect(page.locator(".record .field-turn")).to_contain_text(f"({record['turnCount']} so far)")
            activity = page.get_by_role("log", name="Activity")
            expect(activity.locator("li.kind-llm_turn_completed .turn").first).to_have_text("T2")
            # the per-turn action slot issue 44 fills ("Fork from here"): one per turn card
            expect(card.locator("article.conv-turn > .conv-turn-head > .conv-turn-actions")).to_have_count(
                record["turnCount"]
            )
            tab.check_requests(stack.token)
        finally:
            tab.context.close()
        # the API says each message's turn: the replies' are the events'
        messages = stack.api("GET", f"/sessions/{sid}/conversation")[1]["data"]["messages"]
        assert [m["turnId"] for m in messages if m["role"] == "assistant"] == answered
        assert all("turnId" in m for m in messages)
    finally:
        stack.stop()


# --- 2 and 8: the session page, and the sessions list -------------------------------------------


def mid_run(stack: ConsoleStack) -> str:
    """A session held in turn 2 (turn 1 answered; the steer delivered to turn 2), with a pending
    steer, on a model with a thinking budget."""
    workspace = str(stack.tmp / "workspace")
    before = len(stack.model_requests())
    body = {
        "workflowId": "explore-and-document",
        "goal": GOAL,
        "workspacePath": workspace,
        "agentConfig": AGENT,
    }
    status, answer = stack.api("POST", "/auto/dispatch", body)
    assert status == 202 and "warnings" not in answer["data"], answer
    sid = str(answer["data"]["sessionId"])
    wait_until(lambda: len(stack.model_requests()) > before, "turn 1's model call", procs=stack.procs)
    wait_until(lambda: stack.session(sid)["turnId"] == 1, "live turn 1", procs=stack.procs)
    assert stack.api("POST", f"/sessions/{sid}/steer", {"text": STEER})[0] == 200
    stack.release(keep_holding=True)
    wait_until(lambda: stack.session(sid)["turnId"] == 2, "turn 2 live", procs=stack.procs)
    pending = {
        "text": "Keep docs/ARCHITECTURE.md under two pages, and link it from the README.",
        "expectedTurnId": 2,
    }
    assert stack.api("POST", f"/sessions/{sid}/steer", pending)[0] == 200
    return sid


def test_the_session_page_leads_with_the_conversation_and_says_what_the_session_runs(
    browser: Browser, held: ConsoleStack, shots_dir: Path
) -> None:
    sid = mid_run(held)
    tab = open_console(browser, held.url, held.token, viewport=DESKTOP)
    try:
        page = tab.goto(f"/sessions/{sid}")
        card = page.get_by_role("region", name="Conversation")
        expect(card.locator("article.conv-turn").first).to_be_attached()
        # at 1280x800, without scrolling: the conversation and its first turn, and the steer box
        assert page.evaluate("window.scrollY") == 0
        expect(card).to_be_in_viewport()
        expect(card.locator("article.conv-turn").first).to_be_in_viewport()
        expect(card.locator('article[data-turn="1"] .conv-text')).to_contain_text("Working through")
        expect(card.locator('article[data-turn="2"]')).to_contain_text("Running")
        box = page.get_by_role("textbox", name="Steer")
        expect(box).to_be_in_viewport()
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        expect(page.get_by_role("table", name="Steers")).to_be_in_viewport()
        expect(box).to_be_in_viewport()  # docked: in view wherever the page is scrolled
        page.evaluate("window.scrollTo(0, 0)")
        # the record: the model, the thinking budget and the cost, in full
        expect(page.locator(".record .field-model")).to_have_text("claude-sonnet-4-5")
        expect(page.locator(".record .field-thinking")).to_have_text("2,048 tokens")
        expect(page.locator(".record .field-cost")).to_have_text(re.compile(r"^\$\d+\.\d{6}$"))
        cut = page.evaluate(CUT, ".record dd")
        assert not [c for c in cut if re.search(r"field-(model|thinking|cost|usage)", c)], cut
        # the steer text column reads as lines, not a word or three a line
        text_width = (
            page.get_by_role("table", name="Steers")
            .locator("tbody td.col-text")
            .first.evaluate("(td) => td.getBoundingClientRect().width")
        )
        print(f"steer text column: {text_width:.0f} px at 1280 px")
        assert text_width >= 500, text_width
        shot(page, "session-desktop.png", shots_dir)
        tab.check_requests(held.token)
    finally:
        tab.context.close()
    for layout, viewport, dark in LAYOUTS[1:]:
        other = open_console(browser, held.url, held.token, viewport=viewport, dark=dark)
        try:
            page = other.goto(f"/sessions/{sid}")
            expect(page.locator('article[data-turn="1"] .conv-text')).to_contain_text("Working through")
            expect(page.get_by_role("textbox", name="Steer")).to_be_in_viewport()
            assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
            shot(page, f"session-{layout}.png", shots_dir)
        finally:
            other.context.close()


def test_an_unknown_model_is_said_at_dispatch_and_on_the_record(
    console: Console, stack: ConsoleStack
) -> None:
    workspace = str(stack.tmp / "workspace")
    body = {
        "workflowId": "two-step",
        "goal": "Try a model",
        "workspacePath": workspace,
        "agentConfig": {"model": "gpt-4o"},
    }
    status, answer = stack.api("POST", "/auto/dispatch", body)
    assert status == 202 and answer["data"]["warnings"][0]["code"] == "unknown_model", answer
    sid = answer["data"]["sessionId"]
    stack.wait_status(sid, "completed")
    page = console.goto(f"/sessions/{sid}")
    expect(page.locator(".record .field-model")).to_have_text("gpt-4o")
    expect(page.locator(".record .field-cost")).to_have_text("unknown: gpt-4o is not in the price table")


def test_the_sessions_list_keeps_workflows_whole_and_a_phone_shows_the_id_tail_and_goal(
    browser: Browser, stack: ConsoleStack
) -> None:
    sid = stack.dispatch(GOAL, workflow="explore-and-document")
    desktop = open_console(browser, stack.url, stack.token, viewport=DESKTOP)
    try:
        page = desktop.goto("/")
        row = page.get_by_role("table", name="Sessions").locator(f'tbody tr[data-id="{sid}"]')
        expect(row.locator("td.col-workflow")).to_have_text("explore-and-document")
        cut = page.evaluate(CUT, ".sessions td.col-workflow, .sessions td.col-outcome, .sessions th")
        assert cut == [], f"cut at 1280 px: {cut}"
    finally:
        desktop.context.close()
    phone = open_console(browser, stack.url, stack.token, viewport=NARROW)
    try:
        page = phone.goto("/")
        row = page.get_by_role("table", name="Sessions").locator(f'tbody tr[data-id="{sid}"]')
        expect(row.locator(".id-short")).to_be_visible()
        expect(row.locator(".id-short")).to_have_text(f"…{sid[-12:]}")
        expect(row.locator(".narrow-meta")).to_be_visible()
        expect(row.locator(".narrow-meta")).to_contain_text("Map this repository")
        expect(row.get_by_role("link", name=sid)).to_be_visible()  # its accessible name: the whole id
        page.goto(f"{stack.url}/sessions/{sid[-12:]}")  # the tail, pasted into a URL: that session
        expect(page.get_by_role("heading", level=1)).to_contain_text(sid)
    finally:
        phone.context.close()
    stack.wait_status(sid, "completed")


# --- 4. a pasted link signs in ---------------------------------------------------------------------


def test_a_console_link_pasted_into_a_tab_showing_sign_in_signs_in(
    browser: Browser, stack: ConsoleStack
) -> None:
    tab = open_console(browser, stack.url, None)  # nothing in sessionStorage: the sign-in page
    try:
        page = tab.goto("/")
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        tab.mark()
        page.goto(
            f"{stack.url}/#token={TOKEN}"
        )  # what `worktrain console` prints, pasted: only the fragment changes
        expect(page.get_by_role("table", name="Sessions")).to_be_visible()
        assert not tab.reloaded(), "signed in without a reload"
        assert "token" not in page.url and "#" not in page.url, page.url
        assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") == TOKEN
        tab.check_requests(TOKEN)
    finally:
        tab.context.close()


# --- 3. the Fleet page ---------------------------------------------------------------------------------


def fleet_history(now: float, hours: int = 3) -> list[Any]:
    """A plausible afternoon, one sample a minute: work picks up, peaks, and dies down to what
    this test's stack has now (nothing running, nothing kept), so the page's own readings join it."""
    from daemon.bus.fleet.history import FleetSample, minute_of  # (here: the rest runs on older code too)

    samples = []
    end = minute_of(now) - 60
    count = hours * 60
    for i in range(count, 0, -1):
        busy = math.sin(math.pi * i / count) ** 2  # 0 at both ends
        running = max(0, round(4 * busy + busy * math.sin(i / 6)))
        waiting = int(busy > 0.5 and i % 29 < 5)
        sessions = {"queued": max(0, running - 3), "running": running, "waiting": waiting,
                    "completed": 0, "failed": 0, "cancelled": 0}  # fmt: skip
        steers = 2 if busy > 0.3 and i % 17 == 0 else 1 if busy > 0.2 and i % 7 == 0 else 0
        samples.append(FleetSample(t=end - i * 60, workers=2, queueDepth=sessions["queued"],
                                   sessions=sessions, inFlight=min(running, 3), cap=0, steersPerMinute=steers,
                                   p50=round(0.35 + 0.1 * math.sin(i / 17), 3),
                                   p99=round(1.4 + 0.3 * math.cos(i / 29), 3)))  # fmt: skip
    return samples


LEGEND_COLOURS = """(chart) => Object.fromEntries(
  [...document.querySelectorAll(`#${chart} .u-legend .u-series`)].map((row) => [
    row.querySelector('.u-label')?.textContent,
    getComputedStyle(row.querySelector('.u-marker') || row).borderColor,
  ]))"""
BADGE_COLOUR = """(status) => getComputedStyle(
  document.querySelector(`.fleet-status[data-status="${status}"] .badge`)).color"""


def test_the_fleet_page_charts_the_hours_before_it_opened(
    browser: Browser, tmp_path: Path, shots_dir: Path
) -> None:
    from daemon.bus.fleet.history import FleetHistory

    stack = start_stack(tmp_path, worker=False)  # no sampler yet: the history is written first
    try:
        client = stack.redis.client()
        history = FleetHistory(client, Keys("wt"))
        assert all(history.record(sample) for sample in fleet_history(time.time()))
        client.close()
        command = [sys.executable, "-m", "cli", "worker", "--processes", "2"]
        stack.spawn("worker", command, worker_env(stack, "http://127.0.0.1:9"))
        opened = time.time()
        for layout, viewport, dark in LAYOUTS:
            tab = open_console(browser, stack.url, stack.token, viewport=viewport, dark=dark)
            try:
                page = tab.goto("/fleet")
                workers = page.get_by_role("table", name="Workers")
                expect(workers.locator("tbody tr")).to_have_count(2)
                chart = page.locator("#chart-sessions")
                expect(chart).to_have_attribute("data-points", re.compile(r"^(1[89]\d|[2-9]\d\d)$"))
                first = float(chart.get_attribute("data-first") or "inf")
                print(f"{layout}: the chart starts {(opened - first) / 3600:.2f} h before the page opened")
                assert first <= opened - 3 * 3600 + 120, "samples older than the page"
                if layout == "desktop":
                    check_fleet_details(page)
                shot(page, f"fleet-{layout}.png", shots_dir)
                tab.check_requests(stack.token)
            finally:
                tab.context.close()
    finally:
        stack.stop()


def check_fleet_details(page: Any) -> None:
    """Time labels, one colour per status, the compact workers table, the window buttons."""
    labels = page.evaluate(
        """async () => {
          const { timeLabels } = await import('/console/js/fleetcharts.js');
          const start = Date.UTC(2026, 0, 5, 21, 0) / 1000;
          return timeLabels([0, 1, 2, 3, 4, 5].map((i) => start + i * 3600), 5 * 3600);
        }"""
    )
    print("time labels:", labels)
    assert all(re.fullmatch(r"\d\d:\d\d|[A-Z][a-z]{2} \d{1,2}, \d\d:\d\d", label) for label in labels), labels
    legend = page.evaluate(LEGEND_COLOURS, "chart-sessions")
    for status in ("queued", "running", "waiting", "completed", "failed", "cancelled"):
        badge = page.evaluate(BADGE_COLOUR, status)
        assert legend[status] == badge, (status, legend[status], badge)
    heights = (
        page.get_by_role("table", name="Workers")
        .locator("tbody tr")
        .evaluate_all("(rows) => rows.map((r) => r.getBoundingClientRect().height)")
    )
    assert max(heights) < 48, f"a worker takes {max(heights):.0f} px: one line each"
    sandbox = page.locator(".workers .col-sandbox details").first
    expect(sandbox.locator("summary")).to_have_text(re.compile(r"^(all \d+ layers|\d+ of \d+ missing)$"))
    expect(sandbox.locator(".sandbox-layers")).to_be_hidden()
    sandbox.locator("summary").click()  # the layers, on demand
    expect(sandbox.locator(".sandbox-layers li").first).to_be_visible()
    sandbox.locator("summary").click()
    page.get_by_role("group", name="Chart window").get_by_role("button", name="1 h").click()
    first = float(page.locator("#chart-sessions").get_attribute("data-first") or "0")
    assert first >= time.time() - 3600 - 120, "the 1 h window starts an hour ago"
    page.get_by_role("group", name="Chart window").get_by_role("button", name="6 h").click()
