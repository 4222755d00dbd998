"""From a browser (issue 21: L2 and the signed-in link of docs/security.md).

- L2, the finding: a page on another origin cancelled a session of the token-less server
  with `fetch(..., {mode: 'no-cors', method: 'POST'})`. Here real Chromium loads an
  attacker's page from another local server (another origin on the same site, and
  `localhost`: another site) that sends every no-cors state change it can; the server
  refuses each (the browser's own record of the responses says 403/415), and the session
  is neither cancelled nor steered.
- The link `up` and `worktrain console` print (`/#token=...`) opens the console signed in;
  the token moves into sessionStorage and leaves the address bar, and is in no request URL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from daemon.host.embedded_redis import free_port
from tests.console.conftest import TOKEN, TOKEN_KEY, Browser, ConsoleStack, expect, open_console, start_stack

pytestmark = pytest.mark.e2e

ATTACK = """<!doctype html><title>cute cats</title><script>
const target = %(target)r;
const sid = %(sid)r;
const attempts = [
  [`/api/v2/sessions/${sid}/cancel`, {}],
  [`/api/v2/sessions/${sid}/cancel`, {body: '{}', headers: {'Content-Type': 'text/plain'}}],
  [`/api/v2/sessions/${sid}/steer`, {body: '{"text": "INJECTED BY A WEB PAGE"}'}],
  [`/api/v2/sessions/${sid}/steer`,
   {body: 'text=x', headers: {'Content-Type': 'application/x-www-form-urlencoded'}}],
  ['/api/v2/auto/dispatch',
   {body: JSON.stringify({workflowId: 'two-step', goal: 'pwn', workspacePath: '/tmp'})}],
];
Promise.allSettled(attempts.map(([path, init]) =>
  fetch(target + path, {mode: 'no-cors', method: 'POST', credentials: 'include', ...init})))
  .then(() => { document.title = 'done'; });
</script>"""


class AttackerSite:
    """Another local web server, serving one page that attacks `target`."""

    def __init__(self, page: str) -> None:
        body = page.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def open_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    """`worktrain web` without a token (an explicitly configured local setup), no worker."""
    running = start_stack(tmp_path_factory.mktemp("cross-origin"), token=None, worker=False)
    yield running
    running.stop()


@pytest.mark.parametrize("attacker_host", ["127.0.0.1", "localhost"])  # same site / another site
def test_a_page_on_another_origin_cannot_cancel_steer_or_dispatch(
    browser: Browser, open_stack: ConsoleStack, attacker_host: str
) -> None:
    sid = open_stack.dispatch()  # queued (no worker): a cancel would end it at once
    _, before = open_stack.api("GET", "/sessions")
    site = AttackerSite(ATTACK % {"target": open_stack.url, "sid": sid})
    context = browser.new_context()
    answers: list[tuple[str, int]] = []
    page = context.new_page()
    page.on("response", lambda r: answers.append((r.url, r.status)) if "/api/v2/" in r.url else None)
    try:
        page.goto(f"http://{attacker_host}:{site.port}/")
        expect(page).to_have_title("done")
    finally:
        context.close()
        site.close()
    # Each request reached WorkTrain (the test can fail) and was refused there.
    assert len(answers) == 5, answers
    assert {status for _, status in answers} <= {403, 415}, answers
    assert 403 in {status for _, status in answers}  # the browser named the page's origin
    session = open_stack.session(sid)
    assert (session["status"], session["pendingSteers"]) == ("queued", 0)
    _, after = open_stack.api("GET", "/sessions")
    assert after["data"]["totalCount"] == before["data"]["totalCount"]  # nothing dispatched


@pytest.fixture(scope="module")
def token_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    running = start_stack(tmp_path_factory.mktemp("signed-in-link"), token=TOKEN, worker=False)
    yield running
    running.stop()


def test_the_link_with_a_token_fragment_opens_the_console_signed_in(
    browser: Browser, token_stack: ConsoleStack, shots_dir: Path
) -> None:
    tab = open_console(browser, token_stack.url, token=None)  # a fresh tab: nothing stored
    try:
        page = tab.goto(f"/#token={TOKEN}")
        expect(page.get_by_role("table", name="Sessions")).to_be_visible()
        assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") == TOKEN
        assert page.url == token_stack.url + "/"  # out of the address bar
        assert TOKEN not in page.evaluate("location.href + document.referrer")
        page.screenshot(path=shots_dir / "signed-in-link.png")
        tab.check_requests(TOKEN)  # bearer header on every API request, never in a URL
        # A reload keeps the tab signed in (sessionStorage), with no fragment to read again.
        page.reload()
        expect(page.get_by_role("table", name="Sessions")).to_be_visible()
    finally:
        tab.context.close()
