"""The console's server side: its pages and files, and the live global event stream it reads.

(The console itself is tested in a real browser: tests/console.)
"""

from __future__ import annotations

import fnmatch
import threading
import tomllib
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from daemon.bus.streams.eventsink import EventSink
from daemon.host.config import Settings
from daemon.schema.events import TurnStarted
from tests.web.conftest import FIXTURE_WORKFLOWS, TOKEN, Web, error_of, make_web
from tests.web.test_streams import sse_messages
from web.serve import build_app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "web" / "console"
SSE = {"Accept": "text/event-stream"}


@pytest.mark.parametrize("path", ["/", "/dispatch", "/issues", "/sessions/sess_01JD0000000000000000000000"])
def test_every_page_is_the_shell_with_a_strict_policy(web: Web, path: str) -> None:
    response = web.http.get(path)
    assert response.status_code == 200 and response.mimetype == "text/html"
    html = response.get_data(as_text=True)
    assert 'data-mode="daemon"' in html and 'data-auth="none"' in html
    assert '<script type="module" src="/console/js/main.js">' in html
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-cache"


def test_the_files_are_served_with_the_same_policy(web: Web) -> None:
    for name, mimetype in (("js/main.js", "text/javascript"), ("console.css", "text/css")):
        response = web.http.get(f"/console/{name}")
        assert response.status_code == 200, name
        assert response.mimetype in (mimetype, "application/javascript"), response.mimetype
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        response.close()
    assert error_of(web.http.get("/console/js/nope.js")) == (404, "not_found")
    assert error_of(web.http.post("/")) == (405, "method_not_allowed")


BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_a_browser_on_an_unknown_path_gets_the_console_not_json(web: Web) -> None:
    """Issue 33: `/nonsense/page` in a browser is the console's not-found page (404, the shell
    and its policy); the API, curl (`*/*`) and static files keep the JSON error."""
    response = web.http.get("/nonsense/page", headers=BROWSER)
    assert (response.status_code, response.mimetype) == (404, "text/html")
    assert '<script type="module" src="/console/js/main.js">' in response.get_data(as_text=True)
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert error_of(web.http.get("/nonsense/page")) == (404, "not_found")
    assert error_of(web.http.get("/nonsense/page", headers={"Accept": "*/*"})) == (404, "not_found")
    assert error_of(web.http.get("/api/v2/nonsense", headers=BROWSER)) == (404, "not_found")
    assert error_of(web.http.get("/console/js/nope.js", headers=BROWSER)) == (404, "not_found")


def test_the_shell_says_token_and_standalone(real_redis: object, tmp_path: Path) -> None:
    with_token = make_web(real_redis, tmp_path, token=TOKEN)  # type: ignore[arg-type]
    assert 'data-auth="token"' in with_token.http.get("/").get_data(as_text=True)
    # The pages are open (they hold no data); the API is not.
    assert error_of(with_token.http.get("/api/v2/sessions")) == (401, "unauthorized")
    settings = Settings(data_dir=tmp_path, redis_url="redis://127.0.0.1:9/0", workflows_dir=FIXTURE_WORKFLOWS)
    standalone: FlaskClient = build_app(settings, standalone=True).test_client()
    html = standalone.get("/").get_data(as_text=True)
    assert 'data-mode="standalone"' in html and 'data-auth="none"' in html
    # No live stream without Redis: the console polls the page instead.
    response = standalone.get("/api/v2/events", headers=SSE)
    assert response.mimetype == "application/json" and response.get_json()["data"]["events"] == []


def test_events_as_sse_start_at_the_end_and_follow(real_web: Web) -> None:
    web = real_web
    old = web.new_session()
    EventSink(web.client, web.keys, None).emit(TurnStarted(sessionId=old, turnId=1))  # before: not replayed
    sid = web.new_session()
    first_read = threading.Event()

    def emit() -> None:
        first_read.wait(10)
        sink = EventSink(web.client, web.keys, None)
        sink.emit(TurnStarted(sessionId=sid, turnId=1), TurnStarted(sessionId=sid, turnId=2))

    response = web.http.get("/api/v2/events", headers=SSE)
    assert response.mimetype == "text/event-stream"
    chunks = iter(response.response)
    assert next(chunks) == b"retry: 2000\n\n"
    first_read.set()
    driver = threading.Thread(target=emit)
    driver.start()
    seen = []
    for message in sse_messages(chunks):
        seen.append(message)
        if len(seen) == 2:
            break
    response.close()
    driver.join()
    assert [(m["event"], sid in m["data"]) for m in seen] == [("turn_started", True)] * 2
    ids = [entry_id for entry_id, _ in web.client.xrange(web.keys.events)]
    assert [m["id"] for m in seen] == ids[-2:]

    # From a Last-Event-ID on: exactly what came after it, filtered by session if asked.
    again = web.http.get(f"/api/v2/events?sessionId={sid}", headers={**SSE, "Last-Event-ID": ids[-2]})
    message = next(sse_messages(iter(again.response)))
    again.close()
    assert message["id"] == ids[-1]


def test_events_as_sse_refuse_a_bad_cursor_and_json_stays_the_default(web: Web) -> None:
    assert error_of(web.http.get("/api/v2/events", headers={**SSE, "Last-Event-ID": "1-x"})) == (
        400,
        "invalid_request",
    )
    assert error_of(web.http.get("/api/v2/events?sessionId=bogus", headers=SSE)) == (400, "invalid_request")
    for accept in ("*/*", "application/json", "text/event-stream;q=0"):
        response = web.http.get("/api/v2/events", headers={"Accept": accept})
        assert response.mimetype == "application/json", accept


def test_the_package_ships_every_console_file() -> None:
    """pyproject's package-data globs cover every file of web/console (a wheel has them all)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "web.console" in config["tool"]["setuptools"]["packages"]
    globs = config["tool"]["setuptools"]["package-data"]["web.console"]
    files = [p.relative_to(CONSOLE).as_posix() for p in CONSOLE.rglob("*") if p.is_file()]
    shipped = [f for f in files if not f.endswith((".py", ".pyc")) and "__pycache__" not in f]
    assert "static/js/main.js" in shipped and "index.html" in shipped

    # setuptools' `*` stays within one folder; fnmatch's does not: compare the depth too.
    def covered(name: str) -> bool:
        return any(fnmatch.fnmatch(name, g) and name.count("/") == g.count("/") for g in globs)

    assert [f for f in shipped if not covered(f)] == []
