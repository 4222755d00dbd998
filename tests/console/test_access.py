"""Who may see what: the token sign-in, the read-only standalone console, and the one origin."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import TOKEN, TOKEN_KEY, Browser, Console, ConsoleStack, expect, open_console
from tests.e2e.test_steer_e2e import http

pytestmark = pytest.mark.e2e


def test_sign_in_with_the_api_token(browser: Browser, stack: ConsoleStack, shots_dir: Path) -> None:
    tab = open_console(browser, stack.url, token=None)  # a fresh tab: nothing in sessionStorage
    page = tab.goto("/")
    try:
        field = page.get_by_label("API token")
        expect(field).to_have_attribute("type", "password")
        expect(page.get_by_role("table", name="Sessions")).to_have_count(0)
        # issue 33: `up` users never set WORKTRAIN_API_TOKEN: the page says where theirs is
        where = page.locator(".signin-where")
        expect(where).to_contain_text("worktrain console")
        expect(where).to_contain_text("~/.worktrain/api-token")
        page.screenshot(path=shots_dir / "signin.png")

        field.fill("not-the-token-but-long-enough-0123456789")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text("unauthorized: That token was refused.")
        assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") is None

        field.fill(TOKEN)
        field.press("Enter")
        expect(page.get_by_role("table", name="Sessions")).to_be_visible()
        assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") == TOKEN
        assert page.evaluate("localStorage.length") == 0
        expect(page.get_by_role("button", name="Sign out")).to_be_visible()

        # The token changes on the server (here: in the tab): the next 401 brings sign-in back.
        page.evaluate(f"sessionStorage.setItem({TOKEN_KEY!r}, 'rotated-away-0123456789-0123456789')")
        page.get_by_role("link", name="Issues", exact=True).click()
        expect(page.get_by_label("API token")).to_be_visible()
        expect(page.get_by_role("alert")).to_contain_text("unauthorized")
        assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") is None
        page.get_by_label("API token").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("table", name="Issues")).to_be_visible()  # back where it was

        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_label("API token")).to_be_visible()
        assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") is None
        # Signed in, every API request carried the bearer header; no URL, no cookie held it.
        signed_in = [r for r in tab.requests if "/api/v2/" in r.url and "/workflows" not in r.url]
        assert signed_in and all(r.headers.get("authorization", "").startswith("Bearer ") for r in signed_in)
        assert not [r.url for r in tab.requests if TOKEN in r.url]
        assert tab.context.cookies() == []
    finally:
        tab.context.close()


@pytest.fixture
def standalone(stack: ConsoleStack) -> Iterator[str]:
    """`worktrain web --standalone` on the stack's data dir: no Redis, no token."""
    env = {k: v for k, v in stack.env.items() if k not in ("REDIS_URL", "WORKTRAIN_API_TOKEN")}
    before = len(stack.procs)
    url = stack.start_web("standalone", env, "--standalone")
    yield url
    for proc in stack.procs[before:]:
        proc.stop()
    del stack.procs[before:]


def test_the_standalone_console_is_read_only(
    browser: Browser, stack: ConsoleStack, standalone: str, shots_dir: Path
) -> None:
    session_id = stack.dispatch(goal="Seen later from the mirrors")
    assert stack.api("POST", f"/sessions/{session_id}/steer", {"text": "a steer for the record"})[0] == 200
    stack.wait_status(session_id, "completed")
    tab = open_console(browser, standalone, token=None)
    try:
        page = tab.goto("/")
        expect(page.get_by_text("Read-only (standalone)")).to_be_visible()
        row = page.get_by_role("table", name="Sessions").get_by_role("row").filter(has_text=session_id)
        expect(row).to_contain_text("completed")
        expect(row).to_contain_text("workflow_complete")
        expect(row.locator("td").nth(5)).to_have_text("2/2")
        page.screenshot(path=shots_dir / "standalone-sessions.png")

        row.get_by_role("link", name=session_id).click()
        activity = page.get_by_role("log", name="Activity")
        expect(activity).to_contain_text("Session ended completed: workflow_complete")
        expect(page.locator(".record .field-goal")).to_have_text("Seen later from the mirrors")
        steer = page.get_by_role("table", name="Steers").locator('tbody tr[data-offset="1"]')
        expect(steer).to_contain_text("delivered (turn")
        expect(page.get_by_role("button", name="Send steer")).to_have_count(0)
        expect(page.get_by_role("textbox", name="Steer")).to_have_count(0)
        expect(page.get_by_role("button", name="Cancel session")).to_have_count(0)
        expect(steer.get_by_role("button", name="Retract")).to_have_count(0)
        expect(page.get_by_text("Read-only console (standalone, no Redis)")).to_be_visible()
        page.screenshot(path=shots_dir / "standalone-session.png")

        page.get_by_role("link", name="Dispatch", exact=True).click()
        expect(page.get_by_role("button", name="Dispatch")).to_be_disabled()
        expect(page.get_by_label("Goal")).to_be_disabled()
        page.get_by_role("link", name="Issues", exact=True).click()
        expect(
            page.get_by_role("table", name="Issues").locator("tbody tr").filter(has_text=session_id)
        ).to_have_count(1)
        tab.check_requests(None)
        # And the API agrees: no steering here.
        status, body = http(
            "POST", f"{standalone}/api/v2/sessions/{session_id}/steer", {"text": "x"}, token=None
        )
        assert (status, body["code"]) == (503, "no_steer_channel")
    finally:
        tab.context.close()


def test_nothing_is_requested_from_another_origin(console: Console, stack: ConsoleStack) -> None:
    session_id = stack.dispatch()
    stack.wait_status(session_id, "completed")
    failed: list[str] = []
    console.page.on("requestfailed", lambda r: failed.append(f"{r.url} {r.failure}"))
    for path in ("/", f"/sessions/{session_id}", "/dispatch", "/issues", "/sessions/sess_nope"):
        page = console.goto(path)
        expect(page.get_by_role("heading", level=1)).to_be_visible()
    # an unknown session is a not-found page (issue 33), not an error banner over a session page
    expect(console.page.locator("main")).to_contain_text("There is no session sess_nope here.")
    kinds = {r.resource_type for r in console.requests}
    assert {"document", "script", "stylesheet", "fetch"} <= kinds, kinds
    # console.check_requests (at teardown) finds every URL on this origin, no uncaught error
    # and no content-policy violation; the only failures are requests a navigation aborted.
    assert not [f for f in failed if not f.endswith("net::ERR_ABORTED")], failed
    # The server forbids anything else too: one origin for scripts, styles, images, fetches.
    for path in ("/", "/console/js/main.js"):
        with urllib.request.urlopen(stack.url + path) as answer:
            policy = answer.headers["Content-Security-Policy"]
        assert (
            "default-src 'none'" in policy
            and "connect-src 'self'" in policy
            and "script-src 'self'" in policy
        )


def test_the_shell_tells_the_mode_and_serves_no_data(stack: ConsoleStack) -> None:
    # The pages are open (like /healthz): they carry no data, only which mode this is.
    with urllib.request.urlopen(f"{stack.url}/sessions/sess_00000000000000000000000000") as answer:
        html = answer.read().decode()
        assert answer.headers["Content-Type"].startswith("text/html")
    assert 'data-mode="daemon"' in html and 'data-auth="token"' in html
    # /api/v2 stays behind the token.
    status, body = http("GET", f"{stack.url}/api/v2/sessions", token=None)
    assert (status, body["code"]) == (401, "unauthorized")
    # An unknown console file is the API's JSON 404, not an HTML page.
    try:
        urllib.request.urlopen(f"{stack.url}/console/js/nope.js")
    except urllib.error.HTTPError as error:
        assert (error.code, json.loads(error.read())["code"]) == (404, "not_found")
    else:
        raise AssertionError("a missing console file answered 200")


def test_the_mirror_fold_takes_steer_events_in_any_order(browser: Browser, standalone: str) -> None:
    """In the mirror, steer_accepted is the web tier's copy, appended after accept.lua ran: a
    quick turn end's steer_delivered can precede it. The standalone journal must still say
    delivered (this raced in the test above under load)."""
    tab = open_console(browser, standalone, token=None)
    try:
        page = tab.goto("/")
        expect(page.get_by_text("Read-only (standalone)")).to_be_visible()
        folded = page.evaluate(
            """async () => {
              const { foldSteerEvent } = await import('/console/js/mirror.js');
              const accepted = (offset) => ({ kind: 'steer_accepted', offset, turnId: 1, ts: 't1' });
              const delivered = (offsets) => ({ kind: 'steer_delivered', offsets, turnId: 2, ts: 't2' });
              const orders = {
                late: [delivered([1, 2]), accepted(1), accepted(2)],
                inOrder: [accepted(1), accepted(2), delivered([1])],
              };
              const out = {};
              for (const [name, events] of Object.entries(orders)) {
                const steers = new Map();
                for (const event of events) foldSteerEvent(steers, event);
                out[name] = [...steers.values()].map(
                  (s) => [s.offset, s.state, s.deliveredTurnId ?? null, s.turnId]);
              }
              return out;
            }"""
        )
        assert folded["late"] == [[1, "delivered", 2, 1], [2, "delivered", 2, 1]]
        assert folded["inOrder"] == [[1, "delivered", 2, 1], [2, "pending", None, 1]]
    finally:
        tab.context.close()
