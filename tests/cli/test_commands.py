"""Client commands against a real `worktrain web` (granian) and a real redis-server.

Each command's success path (people's output and `--json`, parsed) and its error paths with
their exit codes: 2 usage, 3 unreachable, 4 unauthorized, 5 not found, 6 conflict,
7 unprocessable, 8 bad request, 9 unavailable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from cli.client import ExitCode
from daemon.bus.keys import Keys
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import STREAM_FIELD
from daemon.bus.streams.issues import IssueSink
from daemon.host.embedded_redis import free_port
from daemon.schema.events import SessionQueued, TurnEnded, TurnStarted
from daemon.schema.issues import Issue
from tests.cli.conftest import TOKEN, Cli, start_web

pytestmark = pytest.mark.unit

MISSING = "sess_01JD0000000000000000000000"


def dispatch(cli: Cli, workspace: Path, workflow: str = "two-step") -> str:
    code, body = cli.json("dispatch", workflow, "look around", "--workspace", str(workspace))
    assert code == 0, body
    return str(body["data"]["sessionId"])


def start_turn(client: redis.Redis, session_id: str) -> int:
    """Play a worker: claim the session and start its first turn."""
    channel = SteerBus(client, Keys("wt")).channel(session_id, "test-worker", 30)
    channel.claim()
    return channel.start_turn().turn


# ---- dispatch -----------------------------------------------------------------------------


def test_dispatch_prints_the_session_id_alone_on_stdout(cli, tmp_path):
    result = cli("dispatch", "two-step", "look around", "--workspace", str(tmp_path))
    assert result.exit_code == 0
    session_id = result.stdout.strip()
    assert session_id.startswith("sess_") and len(session_id) == 31
    assert f"worktrain steer {session_id}" in result.stderr


def test_dispatch_json_is_the_servers_202_body(cli, tmp_path):
    code, body = cli.json("dispatch", "two-step", "g", "--workspace", str(tmp_path), "--context", '{"a": 1}')
    assert code == 0
    assert body["success"] is True
    assert body["data"]["status"] == "queued" and body["data"]["workflowId"] == "two-step"


def test_dispatch_makes_a_relative_workspace_absolute(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    session_id = cli("dispatch", "two-step", "g", "--workspace", "sub").stdout.strip()
    _, body = cli.json("session", session_id)
    assert body["data"]["workspacePath"] == str(tmp_path / "sub")


def test_dispatch_unknown_workflow_is_a_bad_request(cli, tmp_path):
    result = cli("dispatch", "no-such-workflow", "g", "--workspace", str(tmp_path))
    assert result.exit_code == ExitCode.BAD_REQUEST
    assert result.stderr.count("\n") == 1 and "400 invalid_request" in result.stderr
    assert "Did you mean" not in result.stderr and "`worktrain workflows`" in result.stderr
    code, body = cli.json("dispatch", "no-such-workflow", "g", "--workspace", str(tmp_path))
    assert code == ExitCode.BAD_REQUEST
    assert body["success"] is False and body["code"] == "invalid_request"


def test_dispatch_a_misspelt_workflow_suggests_the_near_match(cli, tmp_path):
    result = cli("dispatch", "two-stpe", "g", "--workspace", str(tmp_path))
    assert result.exit_code == ExitCode.BAD_REQUEST
    assert "Did you mean 'two-step'?" in result.stderr and "`worktrain workflows`" in result.stderr
    code, body = cli.json("dispatch", "Two-Step", "g", "--workspace", str(tmp_path))
    assert (code, body["code"], body["suggestions"][0]) == (
        ExitCode.BAD_REQUEST,
        "invalid_request",
        "two-step",
    )


def test_dispatch_requires_a_workspace_or_here(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("dispatch", "two-step", "g")
    assert result.exit_code == ExitCode.USAGE
    assert "--workspace DIR, or --here" in result.stderr and str(tmp_path) in result.stderr
    assert cli("dispatch", "two-step", "g", "--here", "--workspace", ".").exit_code == ExitCode.USAGE
    session_id = cli("dispatch", "two-step", "g", "--here").stdout.strip()
    _, body = cli.json("session", session_id)
    assert body["data"]["workspacePath"] == str(tmp_path)
    _, sessions = cli.json("sessions")
    assert sessions["data"]["totalCount"] == 1  # the refused ones sent nothing


def test_dispatch_refuses_a_workspace_missing_on_this_host(cli, worker_here, tmp_path):
    missing = tmp_path / "no" / "such"
    result = cli("dispatch", "two-step", "g", "--workspace", str(missing))
    assert result.exit_code == ExitCode.USAGE
    assert f"{missing} does not exist" in result.stderr and "sees this host's files" in result.stderr
    (tmp_path / "file").write_text("x")
    assert "is not a folder" in cli("dispatch", "two-step", "g", "--workspace", str(tmp_path / "file")).stderr
    _, sessions = cli.json("sessions")
    assert sessions["data"]["totalCount"] == 0


@pytest.mark.parametrize("elsewhere", ["container", "none"])
def test_a_loopback_api_whose_workers_see_other_files_gets_the_workspace_unchecked(
    cli, real_redis, tmp_path, elsewhere
):
    """Issue 47: compose publishes the API on 127.0.0.1, but `/workspaces/repo` exists only in
    the worker containers. Their published filesystem view differs from this host's (or no
    worker is live yet), so the path goes to the API as given (here a path under the test
    web's workspace roots that this host does not have)."""
    from tests.cli.conftest import publish_worker

    only_there = str(tmp_path / "in-the-containers" / "repo")

    publish_worker(real_redis)  # one worker here is not enough: every worker must see these files
    if elsewhere == "container":
        publish_worker(real_redis, filesystem="0f0f-boot/mnt:[4026532999]/2049:2")
    else:
        real_redis.flushdb()
    assert cli.url.startswith("http://127.0.0.1:")
    code, body = cli.json("dispatch", "two-step", "g", "--workspace", only_there)
    assert code == 0, body
    _, shown = cli.json("session", body["data"]["sessionId"])
    assert shown["data"]["workspacePath"] == only_there
    worktree = cli("dispatch", "two-step", "g", "--workspace", only_there, "--branch-strategy", "worktree")
    assert worktree.exit_code == 0, worktree.output


@pytest.mark.parametrize("context", ["not json", "[1, 2]", "@/no/such/file"])
def test_dispatch_bad_context_is_a_usage_error(cli, tmp_path, context):
    result = cli("dispatch", "two-step", "g", "--workspace", str(tmp_path), "--context", context)
    assert result.exit_code == ExitCode.USAGE
    assert "--context" in result.stderr


# ---- steer --------------------------------------------------------------------------------


def test_steer_is_accepted_with_contiguous_offsets(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    first = cli("steer", session_id, "Also add a changelog entry.")
    assert first.exit_code == 0
    assert first.stdout == "accepted: offset 1 (no live turn: it reaches the next one)\n"
    code, body = cli.json("steer", session_id, "second")
    assert code == 0
    assert body == {
        "success": True,
        "status": "accepted",
        "steer": {"turnId": 0, "offset": 2, "clientMsgId": None},
    }


def test_steer_reads_its_text_from_stdin(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    assert cli("steer", session_id, "-", input="from stdin\n").exit_code == 0
    _, body = cli.json("session", session_id, "--steers")
    assert [s["text"] for s in body["steers"]["data"]["steers"]] == ["from stdin"]  # the server trims


def test_steer_with_the_live_turn_is_accepted_and_a_stale_one_conflicts(cli, tmp_path, real_redis):
    session_id = dispatch(cli, tmp_path)
    turn = start_turn(real_redis, session_id)
    ok = cli("steer", session_id, "on time", "--expected-turn", str(turn))
    assert ok.exit_code == 0 and f"live turn {turn}" in ok.stdout
    stale = cli("steer", session_id, "late", "--expected-turn", str(turn + 1))
    assert stale.exit_code == ExitCode.CONFLICT
    assert "409 stale_turn" in stale.stderr and f"the live turn is {turn}" in stale.stderr
    code, body = cli.json("steer", session_id, "late", "--expected-turn", str(turn + 1))
    assert code == ExitCode.CONFLICT
    assert body["code"] == "stale_turn" and body["currentTurnId"] == turn


def test_steer_expecting_a_turn_of_a_queued_session_is_no_live_turn(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    code, body = cli.json("steer", session_id, "x", "--expected-turn", "1")
    assert (code, body["code"]) == (ExitCode.CONFLICT, "no_live_turn")


def test_steer_client_msg_id_duplicate_and_reuse(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    assert cli("steer", session_id, "once", "--client-msg-id", "m-1").exit_code == 0
    again = cli("steer", session_id, "once", "--client-msg-id", "m-1")
    assert again.exit_code == 0 and again.stdout.startswith("duplicate: already accepted as offset 1")
    code, body = cli.json("steer", session_id, "other text", "--client-msg-id", "m-1")
    assert (code, body["code"]) == (ExitCode.UNPROCESSABLE, "client_msg_id_reuse")


def test_steer_unknown_session_is_not_found(cli):
    result = cli("steer", MISSING, "hello")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert (
        result.stderr
        == "worktrain: error: Session not found: no session with that id here (unknown, or expired)."
        " [404 session_not_found]\n"
    )
    code, body = cli.json("steer", MISSING, "hello")
    assert (code, body["code"]) == (ExitCode.NOT_FOUND, "session_not_found")


def test_steer_edit_retract_of_a_finished_session_say_how_it_ended(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    assert cli("steer", session_id, "pending").exit_code == 0
    assert cli("cancel", session_id).exit_code == 0  # queued: it ends now, `cancelled`
    for command in (
        ["steer", session_id, "too late"],
        ["edit", session_id, "1", "x"],
        ["retract", session_id, "1"],
    ):
        result = cli(*command)
        assert result.exit_code == ExitCode.NOT_FOUND, command
        assert result.stderr.startswith("worktrain: error: The session has ended (cancelled"), result.stderr
        assert result.stderr.rstrip().endswith("[404 session_finished]"), result.stderr
        code, body = cli.json(*command)
        assert (code, body["code"], body["status"]) == (ExitCode.NOT_FOUND, "session_finished", "cancelled")


@pytest.mark.parametrize("command", [["steer", "sess_nope", "x"], ["session", "../etc"], ["cancel", "1"]])
def test_a_malformed_session_id_is_a_usage_error_and_sends_nothing(cli, command):
    result = cli(*command, WORKTRAIN_URL="http://127.0.0.1:9")  # no server: nothing is sent
    assert result.exit_code == ExitCode.USAGE
    assert "is not a session id" in result.stderr


def test_empty_steer_text_is_a_bad_request(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    code, body = cli.json("steer", session_id, "   ")
    assert (code, body["code"]) == (ExitCode.BAD_REQUEST, "invalid_request")


# ---- sessions, session, cancel, workflows ---------------------------------------------------


def test_sessions_table_and_json(cli, tmp_path):
    first, second = dispatch(cli, tmp_path), dispatch(cli, tmp_path)
    result = cli("sessions")
    assert result.exit_code == 0
    assert first in result.stdout and second in result.stdout and "queued" in result.stdout
    code, body = cli.json("sessions", "--status", "queued")
    assert code == 0
    assert [s["sessionId"] for s in body["data"]["sessions"]] == [second, first]  # newest first
    assert cli.json("sessions", "--status", "completed")[1]["data"]["sessions"] == []


def test_sessions_rejects_an_unknown_status_locally(cli):
    assert cli("sessions", "--status", "sleeping").exit_code == ExitCode.USAGE


def test_session_shows_fields_and_steers(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    cli("steer", session_id, "please hurry", "--client-msg-id", "c1")
    result = cli("session", session_id, "--steers")
    assert result.exit_code == 0
    # issue 33: a readable summary (labels a person reads, no raw camelCase field names)
    for text in ("status", "queued", "workflow", "two-step", "pending steers", "1", "please hurry", "c1"):
        assert text in result.stdout
    for raw in ("workflowId", "pendingSteers", "cacheReadTokens", "turnCount"):
        assert raw not in result.stdout, result.stdout
    code, body = cli.json("session", session_id, "--steers")
    assert code == 0
    assert body["data"]["sessionId"] == session_id and body["data"]["pendingSteers"] == 1
    assert body["steers"]["data"]["steers"][0]["state"] == "pending"


def test_session_unknown_is_not_found(cli):
    assert cli("session", MISSING).exit_code == ExitCode.NOT_FOUND


def test_cancel_a_queued_session(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    result = cli("cancel", session_id)
    assert result.exit_code == 0 and result.stdout.startswith(f"cancel requested: {session_id}")
    _, body = cli.json("session", session_id)
    assert body["data"]["status"] == "cancelled"
    code, _ = cli.json("steer", session_id, "too late")
    assert code == ExitCode.NOT_FOUND


def test_cancel_of_a_finished_session_says_how_it_ended(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    assert cli("cancel", session_id).exit_code == 0  # queued: it ends now, `cancelled`
    result = cli("cancel", session_id)
    assert result.exit_code == ExitCode.CONFLICT
    assert "The session has already ended (cancelled, outcome cancelled): nothing to cancel." in result.stderr
    code, body = cli.json("cancel", session_id)
    assert (code, body["code"], body["status"], body["outcome"]) == (
        ExitCode.CONFLICT, "session_finished", "cancelled", "cancelled",
    )  # fmt: skip


def test_cancel_unknown_is_not_found(cli):
    code, body = cli.json("cancel", MISSING)
    assert code == ExitCode.NOT_FOUND and body["success"] is False


def test_workflows(cli):
    result = cli("workflows")
    assert result.exit_code == 0 and "two-step" in result.stdout
    code, body = cli.json("workflows")
    assert code == 0 and "two-step" in [w["id"] for w in body["data"]["workflows"]]


# ---- events and issues (one page) ---------------------------------------------------------


def test_events_page_and_one_sessions_events(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    other = dispatch(cli, tmp_path)
    cli("steer", session_id, "hello")
    code, body = cli.json("events")
    assert code == 0
    kinds = [(e["sessionId"], e["kind"]) for e in body["data"]["events"]]
    assert (session_id, "session_queued") in kinds and (other, "session_queued") in kinds
    assert body["data"]["next"]
    code, mine = cli.json("events", "--session", session_id)
    assert {e["sessionId"] for e in mine["data"]["events"]} == {session_id}
    text = cli("events", "--session", session_id).stdout
    assert "session_queued" in text and other[-6:] not in text


def test_events_since_the_last_cursor_is_empty(cli, tmp_path):
    # Filtered by session: the shared web server's event mirror may still be writing an
    # earlier test's steer_accepted copies into wt:events (it lingers up to 50 ms).
    session_id = dispatch(cli, tmp_path)
    _, body = cli.json("events", "--session", session_id)
    assert [e["kind"] for e in body["data"]["events"]] == ["session_queued"]
    _, after = cli.json("events", "--session", session_id, "--since", body["data"]["next"])
    assert after["data"]["events"] == []


def test_events_of_one_session_come_from_its_own_stream(cli, real_redis, monkeypatch):
    # What `--follow` (SSE) reads too, so `--since` is an id of that stream either way. The
    # global wt:events is trimmed (MAXLEN ~ 100000): here it holds none of these events.
    session_id = "sess_01JD0000000000000000000042"
    stream = Keys("wt").session(session_id).events
    events = [
        SessionQueued(sessionId=session_id, workflowId="two-step", goal="g"),
        TurnStarted(sessionId=session_id, turnId=1),
        TurnEnded(sessionId=session_id, turnId=1),
    ]
    for seq, event in enumerate(events, start=1):
        real_redis.xadd(stream, {STREAM_FIELD: event.model_dump_json()}, id=f"1-{seq}")
    code, body = cli.json("events", "--session", session_id)
    assert code == 0
    assert [(e["id"], e["kind"]) for e in body["data"]["events"]] == [
        ("1-1", "session_queued"), ("1-2", "turn_started"), ("1-3", "turn_ended")
    ]  # fmt: skip
    assert body["data"]["next"] == "1-3"
    _, after = cli.json("events", "--session", session_id, "--since", "1-1")
    assert [e["kind"] for e in after["data"]["events"]] == ["turn_started", "turn_ended"]
    _, page = cli.json("events", "--session", session_id, "--since", "1-1", "--limit", "1")
    assert [e["kind"] for e in page["data"]["events"]] == ["turn_started"]
    text = cli("events", "--session", session_id, "--since", "1-2")
    assert "turn_ended" in text.stdout and "turn_started" not in text.stdout
    monkeypatch.setattr("cli.follow.SESSION_PAGE", 2)  # read to the end, page after page
    _, paged = cli.json("events", "--session", session_id)
    assert (len(paged["data"]["events"]), paged["data"]["next"]) == (3, "1-3")


def test_issues_page_filtered_by_session(cli, tmp_path, real_redis):
    session_id, other = dispatch(cli, tmp_path), dispatch(cli, tmp_path)
    sink = IssueSink(real_redis, Keys("wt"), None)
    sink.record(Issue(kind="blocked", severity="warn", summary="no network", sessionId=session_id, turnId=1))
    sink.record(Issue(kind="tool_failure", severity="error", summary="bash died", sessionId=other, turnId=2))
    code, body = cli.json("issues", "--session", session_id)
    assert code == 0
    assert [i["summary"] for i in body["data"]["issues"]] == ["no network"]
    text = cli("issues").stdout
    assert "[warn] blocked" in text and "no network" in text and "bash died" in text


# ---- transport and auth errors --------------------------------------------------------------


@pytest.mark.redis
def test_unreachable_server_exits_3_with_one_line_and_a_json_body():
    cli = Cli(f"http://127.0.0.1:{free_port()}")
    result = cli("sessions")
    assert result.exit_code == ExitCode.UNREACHABLE
    assert result.stderr.count("\n") == 1 and "cannot reach WorkTrain" in result.stderr
    code, body = cli.json("steer", MISSING, "x")
    assert code == ExitCode.UNREACHABLE
    assert body["success"] is False and body["code"] == "unreachable"


def test_missing_or_wrong_token_is_unauthorized(cli):
    for token in (None, "wrong"):
        result = cli("sessions", WORKTRAIN_API_TOKEN=token)
        assert result.exit_code == ExitCode.UNAUTHORIZED
        assert "401 unauthorized" in result.stderr and "WORKTRAIN_API_TOKEN" in result.stderr
    code, body = cli.json("sessions", WORKTRAIN_API_TOKEN=None)
    assert (code, body["code"]) == (ExitCode.UNAUTHORIZED, "unauthorized")


def test_token_option_overrides_the_environment(cli):
    assert cli("sessions", "--token", TOKEN, WORKTRAIN_API_TOKEN="wrong").exit_code == 0


def test_the_token_can_come_from_a_file_so_that_ps_never_shows_it(cli, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert cli("sessions", "--token-file", str(token_file), WORKTRAIN_API_TOKEN=None).exit_code == 0
    from_env = cli("sessions", WORKTRAIN_API_TOKEN_FILE=str(token_file), WORKTRAIN_API_TOKEN="wrong")
    assert from_env.exit_code == 0
    missing = cli("sessions", "--token-file", str(tmp_path / "nope"), WORKTRAIN_API_TOKEN=None)
    assert missing.exit_code == ExitCode.USAGE and "cannot read" in missing.stderr


def test_a_url_that_is_not_http_is_a_usage_error():
    result = Cli("ftp://example.invalid")("sessions")
    assert result.exit_code == ExitCode.USAGE and "not an http(s) URL" in result.stderr


def test_the_url_of_a_running_up_is_found_without_worktrain_url(cli, tmp_path):
    (tmp_path / "up.json").write_text(json.dumps({"pid": os.getpid(), "apiUrl": cli.url}))
    result = cli("workflows", WORKTRAIN_URL=None, WORKTRAIN_DATA_DIR=str(tmp_path))
    assert result.exit_code == 0 and "two-step" in result.stdout


@pytest.mark.processes
def test_steer_on_a_standalone_web_is_unavailable(tmp_path):
    web = start_web(tmp_path, redis_url=None, token=None, extra=("--standalone",))
    try:
        code, body = Cli(web.url, token=None).json("steer", MISSING, "hello")
    finally:
        web.stop()
    assert (code, body["code"]) == (ExitCode.UNAVAILABLE, "no_steer_channel")


def test_cancel_a_finished_session_is_a_conflict(cli, tmp_path):
    session_id = dispatch(cli, tmp_path)
    assert cli("cancel", session_id).exit_code == 0
    code, body = cli.json("cancel", session_id)
    assert (code, body["code"]) == (ExitCode.CONFLICT, "session_finished")


@pytest.mark.processes
def test_web_refuses_to_start_with_a_token_no_server_can_carry(tmp_path, redis_server):
    # Servers disagree on header bytes beyond ASCII (granian hands them over as ""), so a
    # non-ASCII token could never be matched: `worktrain web` says so and does not start.
    env = {**os.environ, "WORKTRAIN_API_TOKEN": "tökén-€", "REDIS_URL": redis_server.url}
    result = subprocess.run(
        [sys.executable, "-m", "cli", "web", "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "WORKTRAIN_API_TOKEN" in result.stderr and "printable ASCII" in result.stderr
    assert "Traceback" not in result.stderr
