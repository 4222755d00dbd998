"""Fixtures for the console's browser tests: Chromium driven by Playwright, and real processes.

The stack is what a user runs: redis-server, `worktrain web` (with a token), `worktrain
worker` and the fake model (`python -m daemon.fakemodel`), one per test module. The browser
is Debian's `chromium` (Playwright's own download cannot work without internet), found on
PATH or at $WORKTRAIN_CHROMIUM; without one every test here is skipped, saying so.

Every page a test opens records the requests it makes: at the end of the test they must all
have gone to the console's own origin, and none may carry the token in its URL.
Screenshots go to $WORKTRAIN_CONSOLE_SCREENSHOTS, else a temporary folder (printed).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon.host.embedded_redis import RedisServer, free_port
from tests.e2e.test_steer_e2e import FIXTURE_WORKFLOWS, Stack, http, wait_until

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
)
Browser = sync_api.Browser
BrowserContext = sync_api.BrowserContext
Page = sync_api.Page
Route = sync_api.Route
expect = sync_api.expect

TOKEN = "console-test-token-8d1f3b7e2c9a4e6f0b5d7c1a3e9f2b4d"  # >= 32 printable characters
TOKEN_KEY = "worktrain.apiToken"  # the console's sessionStorage key (static/js/api.js)
# Headless Chromium on a closed network: without the background-networking flags its own
# connections (component updates, sync, ...) are refused and slow every start.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
REPORT_CSP_VIOLATIONS = """
document.addEventListener('securitypolicyviolation', (e) => {
  console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`);
});
"""
DESKTOP = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}

expect.set_options(timeout=20_000)  # a shared 2-core machine: generous, never a fixed sleep


def find_chromium() -> str | None:
    for candidate in (
        os.environ.get("WORKTRAIN_CHROMIUM"),
        "chromium",
        "chromium-browser",
        "/usr/bin/chromium",
    ):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    executable = find_chromium()
    if executable is None:
        pytest.skip(
            "browser tests skipped: no Chromium found (apt-get install -y chromium, or set "
            "WORKTRAIN_CHROMIUM to a Chromium binary); .ci/run installs it first"
        )
    with sync_api.sync_playwright() as playwright:
        # launch() gives each run a fresh temporary profile (user-data-dir) of its own.
        chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def shots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("WORKTRAIN_CONSOLE_SCREENSHOTS")
    path = Path(wanted) if wanted else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {path}", file=sys.stderr)
    return path


@dataclass
class ConsoleStack(Stack):
    """The e2e stack (tests/e2e), with the console's token and a few shortcuts."""

    token: str | None = None

    @property
    def url(self) -> str:
        return self.web_url

    def start_web(self, name: str, env: dict[str, str], *extra: str, port: int = 0) -> str:
        port = port or free_port()
        # 32 threads: an SSE stream holds a thread until the server next writes to a client
        # that left (keep-alive), and a test opens and leaves many pages.
        args = [sys.executable, "-m", "cli", "web", "--bind", "127.0.0.1", "--port", str(port)]
        web = self.spawn(name, [*args, "--workers", "1", "--threads", "32", *extra], env)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: http("GET", f"{url}/readyz", token=None)[0] == 200, f"{name} /readyz", procs=[web])
        return url

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(method, f"{self.url}/api/v2{path}", body, token=self.token)

    def dispatch(self, goal: str = "Look around and write notes", workflow: str = "two-step") -> str:
        workspace = self.tmp / "workspace"
        status, body = self.api(
            "POST", "/auto/dispatch", {"workflowId": workflow, "goal": goal, "workspacePath": str(workspace)}
        )
        assert status == 202, body
        return str(body["data"]["sessionId"])

    def dispatch_held(self, goal: str = "Look around and write notes", workflow: str = "two-step") -> str:
        """Dispatch while the fake model holds calls; return once turn 1's call waits there."""
        before = len(self.model_requests())
        session_id = self.dispatch(goal, workflow)
        wait_until(lambda: len(self.model_requests()) > before, "turn 1's model call", procs=self.procs)
        wait_until(lambda: self.session(session_id)["turnId"] == 1, "live turn 1", procs=self.procs)
        return session_id

    def session(self, session_id: str) -> dict[str, Any]:
        status, body = self.api("GET", f"/sessions/{session_id}")
        assert status == 200, body
        return dict(body["data"])

    def wait_status(self, session_id: str, *statuses: str) -> dict[str, Any]:
        return dict(
            wait_until(
                lambda: (r := self.session(session_id))["status"] in statuses and r,
                f"{session_id} to be {'/'.join(statuses)}",
                procs=self.procs,
            )
        )

    def model_requests(self) -> list[dict[str, Any]]:
        return list(http("GET", f"{self.model_url}/_fake/requests", token=None)[1]["requests"])

    def hold(self) -> None:
        assert http("POST", f"{self.model_url}/_fake/hold", {}, token=None)[0] == 200

    def release(self, keep_holding: bool = False) -> None:
        """The held calls answer; with `keep_holding`, the calls made from now on wait."""
        body = {"keepHolding": True} if keep_holding else {}
        assert http("POST", f"{self.model_url}/_fake/release", body, token=None)[0] == 200

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.redis.stop()


def start_stack(
    tmp: Path,
    token: str | None = TOKEN,
    worker: bool = True,
    model_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> ConsoleStack:
    server = RedisServer(tmp / "redis")
    server.start()
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "WORKTRAIN_DATA_DIR": str(tmp / "data"),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "WORKTRAIN_IDLE_WAIT_SECONDS": "2",
        "HOME": str(tmp),
        **(extra_env or {}),
    }
    env.pop("WORKTRAIN_API_TOKEN", None)
    if token:
        env["WORKTRAIN_API_TOKEN"] = token
    stack = ConsoleStack(tmp, server, env, token=token)
    (tmp / "workspace").mkdir()
    (tmp / "workspace" / "README.md").write_text("# A tiny workspace\n")
    try:
        if worker:
            model = stack.spawn(
                "fakemodel", [sys.executable, "-m", "daemon.fakemodel", "--port", "0", *model_args], env
            )
            line = wait_until(
                lambda: model.log_path.read_text().strip(), "the fake model's URL", procs=[model]
            )
            stack.model_url = line.split()[-1]
        stack.web_url = stack.start_web("web", env)
        if worker:
            worker_env = {
                **env,
                "ANTHROPIC_BASE_URL": stack.model_url,
                "ANTHROPIC_API_KEY": "console-dummy-key",
            }
            worker_env.pop("WORKTRAIN_API_TOKEN", None)  # workers never get the API token
            stack.spawn("worker", [sys.executable, "-m", "cli", "worker", "--processes", "2"], worker_env)
    except BaseException:
        stack.stop()
        raise
    return stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    running = start_stack(tmp_path_factory.mktemp("console-stack"))
    yield running
    running.stop()


@pytest.fixture
def held(stack: ConsoleStack) -> Iterator[ConsoleStack]:
    """The fake model holds every call until the test releases it (or the test ends)."""
    stack.hold()
    try:
        yield stack
    finally:
        stack.release()


@dataclass
class Console:
    """One browser tab on the console, with every request it made."""

    context: BrowserContext
    page: Page
    origin: str
    requests: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # uncaught exceptions, CSP violations

    def goto(self, path: str) -> Page:
        self.page.goto(self.origin + path)
        return self.page

    def mark(self) -> None:
        """Mark the document: `reloaded()` tells whether the page was loaded anew since."""
        self.page.evaluate("window.__consoleTestMark = true")

    def reloaded(self) -> bool:
        return not self.page.evaluate("window.__consoleTestMark === true")

    def check_requests(self, token: str | None) -> None:
        assert self.errors == [], "the page threw or broke its content policy"
        urls = [r.url for r in self.requests]
        assert urls, "the page made no request at all"
        foreign = [u for u in urls if not (u == self.origin or u.startswith(self.origin + "/"))]
        assert not foreign, f"requests to another origin: {foreign}"
        if token:
            assert not [u for u in urls if token in u], "the token appeared in a URL"
            for request in self.requests:
                if "/api/v2/" in request.url and not request.url.endswith("/workflows"):
                    assert request.headers.get("authorization") == f"Bearer {token}", request.url
        assert self.context.cookies() == [], "the console set a cookie"


def open_console(
    browser: Browser,
    origin: str,
    token: str | None,
    *,
    viewport: dict[str, int] = DESKTOP,
    dark: bool = False,
) -> Console:
    context = browser.new_context(viewport=viewport, color_scheme="dark" if dark else "light")
    if token:
        # As if the user had signed in in this tab: the console reads it from sessionStorage.
        context.add_init_script(f"sessionStorage.setItem({TOKEN_KEY!r}, {token!r})")
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    page = context.new_page()
    console = Console(context, page, origin)
    page.on("request", lambda request: console.requests.append(request))
    page.on("pageerror", lambda error: console.errors.append(f"uncaught: {error}"))
    page.on(
        "console", lambda m: console.errors.append(m.text) if m.text.startswith("CSP violation") else None
    )
    return console


@pytest.fixture
def console(browser: Browser, stack: ConsoleStack) -> Iterator[Console]:
    tab = open_console(browser, stack.url, stack.token)
    yield tab
    try:
        tab.check_requests(stack.token)
    finally:
        tab.context.close()
