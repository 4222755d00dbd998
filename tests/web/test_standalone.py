"""Standalone console (README's Console): no Redis, read-only routes from the JSONL mirrors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from daemon.host.config import Settings
from tests.web.conftest import FIXTURE_WORKFLOWS, JsonClient, error_of
from web.serve import build_app

pytestmark = pytest.mark.unit

A = "sess_01JD0000000000000000000000"
B = "sess_01JD0000000000000000000001"


def write_lines(path: Path, rows: list[object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))


@pytest.fixture
def console(tmp_path: Path) -> FlaskClient:
    write_lines(
        tmp_path / "events" / "2026-01-01.jsonl",
        [{"sessionId": A, "kind": "session_queued"}, "{broken", {"sessionId": B, "kind": "session_queued"}],
    )
    write_lines(tmp_path / "events" / "2026-01-02.jsonl", [{"sessionId": A, "kind": "session_completed"}])
    write_lines(
        tmp_path / "issues" / f"{A}.jsonl", [{"sessionId": A, "summary": "a1", "ts": "2026-01-01T00:00:02Z"}]
    )
    write_lines(
        tmp_path / "issues" / f"{B}.jsonl",
        [{"sessionId": B, "summary": "b1", "ts": "2026-01-01T00:00:01Z"},
         {"sessionId": B, "summary": "b2", "ts": "2026-01-01T00:00:03Z"}],
    )  # fmt: skip
    settings = Settings(data_dir=tmp_path, redis_url="redis://127.0.0.1:9/0", workflows_dir=FIXTURE_WORKFLOWS)
    app = build_app(settings, standalone=True)
    app.test_client_class = JsonClient
    return app.test_client()


def test_steer_is_no_steer_channel(console: FlaskClient) -> None:
    response = console.post(f"/api/v2/sessions/{A}/steer", json={"text": "x"})
    assert error_of(response) == (503, "no_steer_channel")


@pytest.mark.parametrize(
    ("method", "path"),
    [("post", "/api/v2/auto/dispatch"), ("get", "/api/v2/sessions"), ("get", f"/api/v2/sessions/{A}"),
     ("post", f"/api/v2/sessions/{A}/cancel"), ("get", f"/api/v2/sessions/{A}/steers"),
     ("get", f"/api/v2/sessions/{A}/events")],
)  # fmt: skip
def test_redis_only_routes_say_so(console: FlaskClient, method: str, path: str) -> None:
    assert error_of(getattr(console, method)(path)) == (503, "standalone_unavailable")


def test_events_from_the_daily_files_with_cursors(console: FlaskClient) -> None:
    page = console.get("/api/v2/events?limit=2").get_json()["data"]
    assert [(e["id"], e["kind"]) for e in page["events"]] == [
        ("2026-01-01:1", "session_queued"),
        ("2026-01-01:3", "session_queued"),
    ]
    rest = console.get(f"/api/v2/events?since={page['next']}").get_json()["data"]
    assert [e["id"] for e in rest["events"]] == ["2026-01-02:1"] and rest["next"] == "2026-01-02:1"
    only_a = console.get(f"/api/v2/events?sessionId={A}").get_json()["data"]["events"]
    assert [e["kind"] for e in only_a] == ["session_queued", "session_completed"]


def test_issues_merged_by_time_and_by_session(console: FlaskClient) -> None:
    everything = console.get("/api/v2/issues").get_json()["data"]["issues"]
    assert [i["summary"] for i in everything] == ["b1", "a1", "b2"]
    page = console.get(f"/api/v2/issues?sessionId={B}&limit=1").get_json()["data"]
    assert [i["summary"] for i in page["issues"]] == ["b1"]
    rest = console.get(f"/api/v2/issues?sessionId={B}&since={page['next']}").get_json()["data"]
    assert [i["summary"] for i in rest["issues"]] == ["b2"]
    assert (
        console.get("/api/v2/issues?sessionId=sess_01JD000000000000000000000Z").get_json()["data"]["issues"]
        == []
    )


def test_bad_cursor_is_400(console: FlaskClient) -> None:
    assert error_of(console.get("/api/v2/events?since=../../etc")) == (400, "invalid_request")


ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x660 + d) for d in range(10)))


@pytest.mark.parametrize(
    "cursor",
    ["2026-01-01:1".translate(ARABIC_INDIC), "2026-01-01:" + "12".translate(ARABIC_INDIC),
     "sess_01JD0000000000000000000000:" + "3".translate(ARABIC_INDIC)],
)  # fmt: skip
def test_a_cursor_of_non_ascii_digits_is_400(console: FlaskClient, cursor: str) -> None:
    # int() reads Arabic-Indic digits as numbers: the cursor regex takes ASCII digits only.
    for route in ("events", "issues"):
        assert error_of(console.get(f"/api/v2/{route}", query_string={"since": cursor})) == (
            400,
            "invalid_request",
        )


def test_health_readiness_and_workflows(console: FlaskClient) -> None:
    assert console.get("/healthz").status_code == 200
    assert console.get("/readyz").get_json()["mode"] == "standalone"
    ids = [w["id"] for w in console.get("/api/v2/workflows").get_json()["data"]["workflows"]]
    assert "two-step" in ids


def test_empty_data_dir(tmp_path: Path) -> None:
    app = build_app(Settings(data_dir=tmp_path / "none", workflows_dir=FIXTURE_WORKFLOWS), standalone=True)
    assert app.test_client().get("/api/v2/events").get_json()["data"] == {"events": [], "next": ""}


def test_the_server_factory_reads_standalone_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web.serve import STANDALONE_ENV
    from web.wsgi import app_from_env

    monkeypatch.setenv(STANDALONE_ENV, "1")
    monkeypatch.setenv("WORKTRAIN_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/0")  # never contacted
    http = app_from_env().test_client()
    assert error_of(http.post(f"/api/v2/sessions/{A}/steer", json={"text": "x"})) == (503, "no_steer_channel")
    assert http.get("/readyz").get_json()["mode"] == "standalone"
