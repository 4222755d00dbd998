"""The session page's conversation and the Fleet page's charts in a real Chromium against real
processes (README's Console, docs/operations.md; issue 33): a finished session read turn by turn (the agent's
text, each tool call with its input and its capped, expandable result, the steer just before
the turn that read it), the renderer's thinking (collapsed) and compaction marks, and the four
Fleet charts drawn by the vendored uPlot under the strict CSP, live. (Issue 45's turn numbering
after a hand-over, the fleet's history and the docs' screenshots: test_operator_console.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.console.conftest import DESKTOP, Browser, Console, ConsoleStack, expect, open_console

pytestmark = pytest.mark.e2e

STEER = "Conversation steer: mention the README's title in your notes"


def test_a_finished_session_reads_turn_by_turn(browser: Browser, held: ConsoleStack, shots_dir: Path) -> None:
    session_id = held.dispatch_held("Read the workspace and say what it is")
    assert held.api("POST", f"/sessions/{session_id}/steer", {"text": STEER})[0] == 200
    held.release()
    held.wait_status(session_id, "completed")
    status, body = held.api("GET", f"/sessions/{session_id}/conversation")
    assert status == 200, body
    messages = body["data"]["messages"]
    assert [m["role"] for m in messages[:2]] == ["user", "assistant"], messages[:2]
    assert any(STEER in (m.get("meta") or {}).get("steers", []) for m in messages), (
        "the steer is in the history"
    )

    tab = open_console(browser, held.url, held.token, viewport={"width": 1280, "height": 1000})
    try:
        page = tab.goto(f"/sessions/{session_id}")
        card = page.get_by_role("region", name="Conversation")
        turns = card.locator(".conv-turn")
        expect(turns.first).to_contain_text("Turn 1")
        assistant_turns = sum(1 for m in messages if m["role"] == "assistant")
        expect(turns).to_have_count(assistant_turns)
        # turn 1: its text, then Read with its input and README's content as the result
        first = turns.first
        expect(first.locator(".conv-text")).to_contain_text("Working through the current step.")
        read = first.locator(".conv-tool", has_text="Read").first
        expect(read.locator(".conv-input")).to_contain_text('"path": "README.md"')
        expect(read.locator(".conv-result")).to_contain_text("# A tiny workspace")
        # the steer, just before the turn that read it, with its journal offset and that turn
        steer = card.locator(".conv-steer", has_text=STEER)
        expect(steer).to_have_count(1)
        expect(steer.locator(".conv-steer-label")).to_have_text("Steer #1 delivered (turn 2)")
        # and the agent's reply of that turn says it heard it (the fake model quotes steers back)
        expect(card.locator('article[data-turn="2"] .conv-text')).to_contain_text(f'You said: "{STEER}"')
        # the step's result: what continue_workflow answered (the next step, in full here)
        result = card.locator(".conv-tool", has_text="continue_workflow").first.locator(".conv-result")
        expect(result).to_contain_text('"status": "advanced"')
        # the card alone, from a full-page render (at the top, the sticky bar stays above it)
        page.evaluate("window.scrollTo(0, 0)")
        box = card.bounding_box()
        assert box is not None
        clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], 1400)}
        page.screenshot(path=str(shots_dir / "console-conversation.png"), full_page=True, clip=clip)
        tab.check_requests(held.token)
    finally:
        tab.context.close()


# A history as the API serves it: thinking, a compaction's summary, a cut result, turn ids.
SYNTHETIC = [
    {
        "role": "user",
        "content": [{"type": "text", "text": "Step one prompt"}],
        "meta": {"steps": ["Step one prompt"]},
        "turnId": 1,
    },
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "Summary of turns 1-3"}],
        "meta": {"summary": True},
        "turnId": None,
    },
    {
        "role": "user",
        "content": [{"type": "text", "text": "[WorkTrain] 3 earlier turn(s) were compacted"}],
        "turnId": 4,
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Let me think about the workspace first.", "signature": "sig"},
            {"type": "text", "text": "Listing the files."},
            {"type": "tool_use", "id": "toolu_x1", "name": "Bash", "input": {"command": "ls -la"}},
        ],
        "turnId": 4,
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_x1", "content": "x" * 1000, "is_error": False},
            {"type": "text", "text": "Step two prompt\n\nsteer text"},
        ],
        "meta": {"steps": ["Step two prompt"], "steers": ["steer text"], "steerOffsets": [7]},
        "cut": [{"toolUseId": "toolu_x1", "chars": 50000}],
        "turnId": None,
        "steers": [{"offset": 7, "text": "steer text", "turnId": None}],
    },
]


def test_the_renderer_collapses_thinking_and_marks_a_compaction(
    browser: Browser, stack: ConsoleStack
) -> None:
    tab = open_console(browser, stack.url, stack.token, viewport=DESKTOP)
    try:
        page = tab.goto("/fleet")
        expect(page.get_by_role("heading", level=1)).to_have_text("Fleet")
        page.evaluate(
            """async (messages) => {
              const { renderConversation } = await import('/console/js/conversation.js');
              const box = document.createElement('div');
              box.className = 'conversation';
              box.id = 'probe';
              const compactions = [{ turnsSummarized: 3, beforeTokens: 90000, afterTokens: 12000 }];
              box.append(...renderConversation(messages, { compactions, turnCount: 4 }));
              document.querySelector('main').prepend(box);
            }""",
            json.loads(json.dumps(SYNTHETIC)),
        )
        probe = page.locator("#probe")
        expect(probe.locator(".conv-compaction-label")).to_have_text(
            "Compacted: 3 earlier turns summarised (90,000 → 12,000 tokens)"
        )
        # the turn after a compaction of 3 turns is turn 4 (its id, from the API)
        expect(probe.locator(".conv-turn .conv-turn-title")).to_have_text(["Turn 4"])
        thinking = probe.locator("details.conv-thinking")
        expect(thinking.locator("summary")).to_have_text("Thinking (39 characters)")
        assert thinking.get_attribute("open") is None, "thinking starts collapsed"
        expect(thinking.locator("pre")).not_to_be_visible()
        expect(probe.locator(".conv-steer-label")).to_have_text("Steer #7 delivered")  # no turn read it yet
        expect(probe.locator(".conv-note")).to_have_text("[WorkTrain] 3 earlier turn(s) were compacted")
        show = probe.get_by_role(
            "button", name="Show all (50,000 characters — the server keeps the first 1,000)"
        )
        result = probe.locator(".conv-result")
        assert result.inner_text() == "x" * 600 + "…"
        show.click()
        assert result.inner_text() == "x" * 1000
        probe.get_by_role("button", name="Show less").click()
        assert result.inner_text() == "x" * 600 + "…"
        tab.check_requests(stack.token)
    finally:
        tab.context.close()


def test_the_fleet_charts_draw_the_last_hour_live(
    browser: Browser, held: ConsoleStack, shots_dir: Path
) -> None:
    tab = open_console(browser, held.url, held.token, viewport={"width": 1280, "height": 1000})
    try:
        page = tab.goto("/fleet")
        charts = page.get_by_label("Fleet charts")
        for name in (
            "Steers / min",
            "Model calls in flight vs the cap",
            "Delivery latency (s)",
            "Sessions by status",
        ):
            expect(charts.get_by_role("heading", name=name)).to_be_visible()
        expect(charts.locator(".uplot canvas")).to_have_count(4)
        steers = charts.locator("#chart-steers")
        session_id = held.dispatch_held("Make the charts move")
        assert held.api("POST", f"/sessions/{session_id}/steer", {"text": "chart steer"})[0] == 200
        # live: the steers chart's latest point (this page's reading) reaches 1 without a reload
        expect(steers).to_have_attribute("data-last", re.compile(r"^[1-9]\d*$"))
        expect(charts.locator("#chart-steers .u-legend")).to_contain_text("accepted, last 60 s")
        held.release()
        held.wait_status(session_id, "completed")
        expect(charts.locator("#chart-latency")).to_have_attribute("data-last", re.compile(r"^\d"))
        page.wait_for_timeout(2500)  # one more reading, so the lines have points to join
        page.screenshot(path=str(shots_dir / "console-fleet-charts.png"))
        # after a reload the page starts from the fleet's history (kept in Redis), not from nothing
        kept = len(held.api("GET", "/fleet/history")[1]["data"]["samples"])
        page.reload()
        expect(charts.locator(".uplot canvas")).to_have_count(4)
        expect(steers).to_have_attribute("data-points", re.compile(r"^\d+$"))
        assert int(steers.get_attribute("data-points") or 0) >= kept
        tab.check_requests(held.token)
    finally:
        tab.context.close()


def test_bad_urls_are_a_not_found_page(console: Console) -> None:
    """Issue 33: an unknown session is not an empty session page (chip, Cancel, steer form)
    under a banner, and an unknown path is no raw JSON."""
    page = console.goto("/sessions/sess_doesnotexist")
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    expect(page.locator("main")).to_contain_text("There is no session sess_doesnotexist here.")
    expect(page.get_by_role("button", name="Cancel session")).to_have_count(0)
    expect(page.get_by_role("button", name="Send steer")).to_have_count(0)
    page = console.goto("/sessions/1234")  # could be a shortened id (issue 45): none ends with it
    expect(page.locator("main")).to_contain_text(
        "There is no session 1234 here: no session id starts or ends with it."
    )
    page = console.goto("/sessions/12")
    expect(page.locator("main")).to_contain_text("(session ids start with sess_)")
    response = page.goto(console.origin + "/nonsense/page")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    expect(page.locator("main")).to_contain_text("There is no page at /nonsense/page in this console.")
