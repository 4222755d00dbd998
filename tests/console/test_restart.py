"""The console rides out a restart of `worktrain web`: it says so, reconnects, catches up."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.console.conftest import Browser, ConsoleStack, expect, open_console, start_stack

pytestmark = pytest.mark.e2e


@pytest.fixture
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    running = start_stack(tmp_path_factory.mktemp("console-restart"), token=None, worker=False)
    yield running
    running.stop()


def test_pages_reconnect_after_the_web_tier_restarts(browser: Browser, quiet: ConsoleStack) -> None:
    first = quiet.dispatch()
    tab = open_console(browser, quiet.url, token=None)
    try:
        page = tab.goto("/")
        table = page.get_by_role("table", name="Sessions")
        expect(table.get_by_role("row").filter(has_text=first)).to_be_visible()
        live = page.locator(".page-head .live")
        expect(live).to_have_attribute("data-state", "live")
        tab.mark()

        (web,) = [p for p in quiet.procs if p.name == "web"]
        web.stop()
        quiet.procs.remove(web)
        expect(live).to_have_attribute("data-state", "reconnecting")
        port = urlsplit(quiet.url).port
        assert port is not None
        quiet.start_web("web", quiet.env, port=port)  # the same address, as a supervisor restarts it
        expect(live).to_have_attribute("data-state", "live")
        second = quiet.dispatch()
        expect(table.get_by_role("row").filter(has_text=second)).to_be_visible()
        assert not tab.reloaded()
        tab.check_requests(None)
    finally:
        tab.context.close()
