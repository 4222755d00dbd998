"""The console's dispatch form carries a Callback URL, and a session's page shows its webhook
deliveries in a "Webhooks" card (README's Webhooks). A stack of its own and a receiver on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.console.conftest import Browser, ConsoleStack, expect, open_console, start_stack
from tests.crash.harness import wait_until
from tests.webhookreceiver import ALLOW_LOOPBACK_ENV, Receiver

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    running = start_stack(tmp_path_factory.mktemp("console-webhooks"), extra_env=ALLOW_LOOPBACK_ENV)
    yield running
    running.stop()


def test_a_session_dispatched_with_a_callback_url_shows_its_delivery(
    browser: Browser, hooked: ConsoleStack, receiver: Receiver
) -> None:
    tab = open_console(browser, hooked.url, hooked.token)
    try:
        page = tab.goto("/dispatch")
        expect(page.get_by_label("Workflow")).to_be_enabled()
        page.get_by_label("Workflow").select_option("two-step")
        page.get_by_label("Goal").fill("Look around and write notes")
        page.get_by_label("Workspace").fill(str(hooked.tmp / "workspace"))
        page.get_by_label("Callback URL").fill(receiver.url)
        page.get_by_role("button", name="Dispatch").click()
        page.wait_for_url("**/sessions/sess_*")
        sid = page.url.rsplit("/", 1)[-1]
        wait_until(lambda: receiver.received(sid, "session.finished"), "session.finished at the receiver")
        assert json.loads(receiver.received(sid)[0][2])["sessionId"] == sid
        card = page.get_by_role("table", name="Webhooks")
        expect(card).to_contain_text("session.finished")
        expect(card).to_contain_text(receiver.url)
        expect(card).to_contain_text("delivered")
        tab.check_requests(hooked.token)
    finally:
        tab.context.close()
