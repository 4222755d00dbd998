"""Every page at 1280x800, in dark mode and on a phone-sized window: screenshots (look at
them) and the checks a screenshot cannot make by itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console.conftest import DESKTOP, NARROW, Browser, ConsoleStack, expect, open_console
from tests.e2e.test_steer_e2e import wait_until

pytestmark = pytest.mark.e2e

LAYOUTS = [("desktop", DESKTOP, False), ("dark", DESKTOP, True), ("narrow", NARROW, False)]
# What each page shows once it has drawn its data.
READY = {
    "sessions": ("table", "Sessions"),
    "session": ("table", "Steers"),
    "dispatch": ("button", "Dispatch"),
    "issues": ("table", "Issues"),
    "fleet": ("table", "Workers"),
    "triggers": ("table", "Triggers"),
}

# Controls (outside a table's own horizontal scroll box) that stick out of the window.
OUTSIDE = """
[...document.querySelectorAll('button, a, input, select, textarea')]
  .filter((el) => el.offsetParent !== null && !el.closest('.table-wrap'))
  .filter((el) => { const r = el.getBoundingClientRect(); return r.left < 0 || r.right > window.innerWidth; })
  .map((el) => el.outerHTML.slice(0, 80))
"""


def mid_run_session(stack: ConsoleStack) -> str:
    """A session held in turn 2 with one steer delivered (turn 2) and one pending."""
    goal = "Map this repository: what it is, how it is built and tested."
    session_id = stack.dispatch_held(goal, workflow="explore-and-document")
    first = {"text": "Start with the README, then the tests folder."}
    assert stack.api("POST", f"/sessions/{session_id}/steer", first)[0] == 200
    stack.release()
    stack.hold()  # turn 2's call arrives just after: held (if it won the race, the page simply shows more)
    wait_until(lambda: stack.session(session_id)["turnCount"] >= 2, "turn 2", procs=stack.procs)
    text = {"text": "Keep docs/ARCHITECTURE.md under two pages.", "expectedTurnId": 2}
    stack.api("POST", f"/sessions/{session_id}/steer", text)
    return session_id


def test_every_page_on_desktop_dark_and_narrow(browser: Browser, held: ConsoleStack, shots_dir: Path) -> None:
    session_id = mid_run_session(held)
    pages = {
        "sessions": "/",
        "session": f"/sessions/{session_id}",
        "dispatch": "/dispatch",
        "issues": "/issues",
        "fleet": "/fleet",
        "triggers": "/triggers",
    }
    for layout, viewport, dark in LAYOUTS:
        tab = open_console(browser, held.url, held.token, viewport=viewport, dark=dark)
        try:
            for name, path in pages.items():
                page = tab.goto(path)
                role, label = READY[name]
                expect(page.get_by_role(role, name=label, exact=True)).to_be_visible()  # type: ignore[arg-type]
                if name == "session":
                    expect(page.get_by_role("log", name="Activity")).to_contain_text("Steer delivered #1")
                if name in ("sessions", "issues", "fleet"):
                    expect(page.locator("table.data tbody tr").first).to_be_visible()
                page.screenshot(path=shots_dir / f"{name}-{layout}.png")
                if name == "session" and layout == "desktop":  # the whole page, to look at
                    page.screenshot(path=shots_dir / "session-desktop-full.png", full_page=True)
                # Readable on a narrow window: the page itself never scrolls sideways.
                overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 0, f"{name} at {layout} is {overflow}px too wide"
                assert page.evaluate(OUTSIDE) == [], f"{name} at {layout}: controls cut off"
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert (background == "rgb(14, 17, 22)") is dark, background  # the dark palette, or not
            tab.check_requests(held.token)
        finally:
            tab.context.close()
