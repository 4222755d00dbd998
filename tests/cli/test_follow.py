"""`events` / `issues --follow` as real processes: new entries appear, Ctrl-C exits 0 quietly;
`events --session ID --follow` reads the session's SSE and ends after `session_completed`."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

from daemon.bus.keys import Keys
from daemon.bus.streams.eventsink import EventSink
from daemon.bus.streams.issues import IssueSink
from daemon.schema.events import (
    ContextCompacted,
    LlmTurnCompleted,
    ModelRetry,
    SessionCompleted,
    ToolCallStarted,
)
from daemon.schema.issues import Issue
from tests.cli.conftest import TOKEN, Cli, WebProcess
from tests.cli.test_commands import dispatch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


class Follower:
    """A `worktrain ... --follow --json` child whose stdout lines are read as they come."""

    def __init__(self, web: WebProcess, *args: str) -> None:
        env = {**os.environ, "WORKTRAIN_URL": web.url, "WORKTRAIN_API_TOKEN": TOKEN}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli", *args, "--json"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(json.loads(raw))

    def next_matching(self, **fields: Any) -> dict[str, Any]:
        while True:
            entry = self.lines.get(timeout=15)
            if all(entry.get(k) == v for k, v in fields.items()):
                return entry

    def interrupt(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        _, err = self.process.communicate(timeout=10)
        return self.process.returncode, err.decode()


def test_events_follow_prints_new_events_and_exits_0_on_ctrl_c(cli: Cli, web_process, tmp_path):
    first = dispatch(cli, tmp_path)
    follower = Follower(web_process, "events", "--follow", "--interval", "0.1")
    try:
        follower.next_matching(sessionId=first, kind="session_queued")
        second = dispatch(cli, tmp_path)  # after the follower started: it must show up too
        follower.next_matching(sessionId=second, kind="session_queued")
        cli("steer", second, "keep going")
        steer = follower.next_matching(sessionId=second, kind="steer_accepted")
        assert steer["offset"] == 1
    finally:
        code, err = follower.interrupt()
    assert code == 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_issues_follow_for_one_session(cli: Cli, web_process, tmp_path, real_redis):
    session_id, other = dispatch(cli, tmp_path), dispatch(cli, tmp_path)
    sink = IssueSink(real_redis, Keys("wt"), None)
    follower = Follower(web_process, "issues", "--follow", "--session", session_id, "--interval", "0.1")
    try:
        sink.record(Issue(kind="blocked", severity="warn", summary="other's", sessionId=other, turnId=1))
        sink.record(
            Issue(kind="needs_human", severity="error", summary="mine", sessionId=session_id, turnId=2)
        )
        issue = follower.next_matching(sessionId=session_id)
        assert (issue["summary"], issue["kind"], issue["turnId"]) == ("mine", "needs_human", 2)
    finally:
        code, err = follower.interrupt()
    assert code == 0 and "Traceback" not in err


def test_events_follow_of_one_session_ends_after_session_completed(
    cli: Cli, web_process, tmp_path, real_redis
):
    session_id = dispatch(cli, tmp_path)
    cli("steer", session_id, "hello")
    follower = Follower(web_process, "events", "--session", session_id, "--follow")
    follower.next_matching(kind="steer_accepted")
    EventSink(real_redis, Keys("wt"), None).emit(
        SessionCompleted(sessionId=session_id, status="completed", outcome="workflow_complete")
    )
    assert follower.next_matching(kind="session_completed")["outcome"] == "workflow_complete"
    assert follower.process.wait(timeout=10) == 0


def test_following_an_unknown_session_is_not_found(cli: Cli):
    result = cli("events", "--session", "sess_01JD0000000000000000000000", "--follow")
    assert result.exit_code == 5 and "404" in result.stderr


def test_events_follow_shows_what_the_agent_says_and_does(cli: Cli, web_process, tmp_path, real_redis):
    """A person watching sees the reply's text, each tool call's input, the weather and the
    compactions (docs/DEVELOPING.md), in text mode."""
    session_id = dispatch(cli, tmp_path)
    said = "I will read the README first.\nThen I will write the notes."
    EventSink(real_redis, Keys("wt"), None).emit(
        LlmTurnCompleted(
            sessionId=session_id, turnId=1, stopReason="tool_use", inputTokens=3, cacheReadTokens=12_000,
            cacheWriteTokens=500, outputTokens=80, text=said,
        ),
        ToolCallStarted(
            sessionId=session_id, turnId=1, toolName="Read", toolUseId="t1",
            inputSummary='{"path": "README.md"}',
        ),
        ModelRetry(
            sessionId=session_id, turnId=2, status=529, attempt=1, waitSeconds=0.7,
            error="overloaded_error: Overloaded",
        ),
        ContextCompacted(
            sessionId=session_id, turnId=3, beforeTokens=16_500, afterTokens=9_800, turnsSummarized=7
        ),
        SessionCompleted(sessionId=session_id, status="completed", outcome="workflow_complete"),
    )  # fmt: skip
    result = cli("events", "--session", session_id, "--follow")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "llm_turn_completed" in out and "12.5k in (12.0k cached), 80 out" in out
    assert "    │ I will read the README first.\n    │ Then I will write the notes." in out
    assert 'tool_call_started    Read {"path": "README.md"}' in out
    assert "529, call 1 failed; next in 0.7s: overloaded_error: Overloaded" in out
    assert "16.5k -> 9.8k tokens, 7 turn(s) summarised (model)" in out


def test_session_and_sessions_show_the_usage(cli: Cli, tmp_path, real_redis):
    session_id = dispatch(cli, tmp_path)
    real_redis.hset(
        f"wt:session:{{{session_id}}}",
        mapping={
            "inputTokens": 1200,
            "cacheReadTokens": 2_400_000,
            "cacheWriteTokens": 30_000,
            "outputTokens": 45_000,
        },
    )
    table = cli("sessions").stdout
    assert "tokens in/out" in table and "2.4M/45.0k" in table
    shown = cli("session", session_id).stdout
    # "in" is the whole prompt: the API's inputTokens are only its uncached part (issue 45)
    assert "2.4M in (2.4M cache read · 30.0k cache write · 1.2k uncached) · 45.0k out" in shown, shown
    _, body = cli.json("session", session_id)
    assert (body["data"]["inputTokens"], body["data"]["cacheWriteTokens"]) == (1200, 30_000)
