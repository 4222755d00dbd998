"""`GET /api/v2/openapi.json` (README's HTTP API) and schemathesis against a real `worktrain web`:
no 5xx, and no answer that breaks the document — without a token, with one, standalone.

The document comes from the route table and the request models; these tests also check
that every route the app serves is in it (and nothing else is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from werkzeug.routing import Rule

from daemon.host.embedded_redis import RedisServer
from tests.web.conftest import TOKEN, Web, error_of
from tests.web.test_server_trust import start
from web.openapi import build_document, openapi_path

pytestmark = pytest.mark.unit

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
    ]
)
MAX_EXAMPLES = "15"
SEED = "20261201"


def test_the_document_is_served_and_lists_exactly_the_apps_routes(web: Web) -> None:
    document = web.http.get("/api/v2/openapi.json").get_json()
    assert document["openapi"].startswith("3.1")
    served = set()
    for rule in web.app.url_map.iter_rules():
        assert isinstance(rule, Rule)
        if not rule.rule.startswith(("/api/", "/healthz", "/readyz", "/metrics")):
            continue  # the console's pages and static files are no part of the API
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                served.add((openapi_path(rule.rule)[0], method.lower()))
    documented = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert documented == served
    dispatch = document["paths"]["/api/v2/auto/dispatch"]["post"]
    body = dispatch["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(document["components"]["schemas"][body]["required"]) == {"workflowId", "goal", "workspacePath"}
    assert "two-step" in document["components"]["schemas"][body]["properties"]["workflowId"]["enum"]


def test_the_document_needs_the_token_like_every_api_route(real_redis, new_web) -> None:  # type: ignore[no-untyped-def]
    web = new_web(real_redis, token=TOKEN)
    assert error_of(web.http.get("/api/v2/openapi.json")) == (401, "unauthorized")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert web.http.get("/api/v2/openapi.json", headers=headers).status_code == 200


def test_building_it_twice_gives_the_same_document() -> None:
    assert json.dumps(build_document()) == json.dumps(build_document())


def run_schemathesis(
    url: str, tmp_path: Path, *extra: str, config: str = ""
) -> subprocess.CompletedProcess[str]:
    config_file = tmp_path / "schemathesis.toml"
    config_file.write_text(config)
    argv = [str(SCHEMATHESIS), "--config-file", str(config_file), "run", f"{url}/api/v2/openapi.json"]
    argv += ["--checks", CHECKS, "--max-examples", MAX_EXAMPLES, "--seed", SEED, "--workers", "1"]
    # Above the longest `?wait=` (60 s): a receipt wait on a steer the fuzzer itself left
    # pending is a correct, slow answer, not a network error.
    argv += ["--request-timeout", "65", "--no-shrink", "--output-sanitize", "false", *extra]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "HOME": str(tmp_path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def seed_sessions(web: object, headers: dict[str, str] | None = None) -> str:
    """Real data for the response schemas to meet: two sessions with a steer each, one of
    them finished (its id is what the event stream's own run passes as {sessionId})."""
    call = web.call  # type: ignore[attr-defined]
    body = {"workflowId": "two-step", "goal": "fuzz me", "workspacePath": "/tmp/ws", "context": {"a": [1]}}
    live = call("POST", "/api/v2/auto/dispatch", body, headers)[1]["data"]["sessionId"]
    done = call("POST", "/api/v2/auto/dispatch", body, headers)[1]["data"]["sessionId"]
    for sid in (live, done):
        call("POST", f"/api/v2/sessions/{sid}/steer", {"text": "a steer", "clientMsgId": "c1"}, headers)
    assert call("POST", f"/api/v2/sessions/{done}/cancel", None, headers)[0] == 202
    return done


def assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


# The event stream of a live session lasts as long as the session (no worker runs here), and
# the fuzzer reuses the ids it sees (dispatch answers, the session list): the stream is
# fuzzed in a run of its own, with a finished session's id, and left out of the others.
# The signals' long poll likewise holds a live session's request for its `wait`.
NO_EVENTS = ("--exclude-operation-id", "session_events", "--exclude-operation-id", "session_signals")
ONLY_EVENTS = ("--include-operation-id", "session_events", "--include-operation-id", "session_signals")


def finished_session(session_id: str) -> str:
    return f'[parameters]\nsessionId = "{session_id}"\n'


# The stateful phase chains calls (dispatch, steer, then read that steer's receipt): a
# receipt wait on a steer no worker will ever deliver (none runs here) is a correct answer
# after its whole `wait`, up to a minute each. Every other phase still fuzzes `wait`; the
# chains run with `wait=0`.
STATELESS = ("--phases", "examples,coverage,fuzzing")
STATEFUL = ("--phases", "stateful")
NO_WAITING = '[parameters]\n"query.wait" = 0\n'


def fuzz_every_phase(url: str, tmp_path: Path, *extra: str) -> None:
    """schemathesis over everything but the event stream and the signals' long poll: the
    stateless phases, then the stateful one without waiting."""
    assert_clean(run_schemathesis(url, tmp_path, *extra, *NO_EVENTS, *STATELESS))
    assert_clean(run_schemathesis(url, tmp_path, *extra, *NO_EVENTS, *STATEFUL, config=NO_WAITING))


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_schemathesis_finds_nothing_without_a_token(redis_server: RedisServer, tmp_path: Path) -> None:
    for web in start(tmp_path, redis_server.url, "--workers", "1"):
        finished = seed_sessions(web)
        url = f"http://127.0.0.1:{web.port}"
        fuzz_every_phase(url, tmp_path)
        assert_clean(run_schemathesis(url, tmp_path, *ONLY_EVENTS, config=finished_session(finished)))


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_schemathesis_finds_nothing_with_a_token(redis_server: RedisServer, tmp_path: Path) -> None:
    auth = ("-H", f"Authorization: Bearer {TOKEN}")
    for web in start(tmp_path, redis_server.url, "--workers", "1", WORKTRAIN_API_TOKEN=TOKEN):
        finished = seed_sessions(web, {"Authorization": f"Bearer {TOKEN}"})
        url = f"http://127.0.0.1:{web.port}"
        fuzz_every_phase(url, tmp_path, *auth)
        assert_clean(run_schemathesis(url, tmp_path, *auth, *ONLY_EVENTS, config=finished_session(finished)))


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_schemathesis_finds_nothing_standalone(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    event = {
        "kind": "session_queued",
        "sessionId": "sess_01JD0000000000000000000000",
        "ts": "2026-01-01T00:00:00Z",
    }
    (events / "2026-01-01.jsonl").write_text(json.dumps(event) + "\nnot json\n")
    for web in start(tmp_path, "redis://127.0.0.1:9/0", "--standalone", "--workers", "1"):
        # The Redis-only routes answer their documented 503 (a server error by definition):
        # what a standalone console serves is fuzzed.
        served = "^/(healthz|readyz|api/v2/(events|issues|workflows|openapi.json))$"
        assert_clean(
            run_schemathesis(f"http://127.0.0.1:{web.port}", tmp_path, "--include-path-regex", served)
        )
