"""Issue 29, item 8: text an agent wrote reached the coordinator's terminal raw. A summary
with `ESC ] 52` wrote the clipboard, `ESC [ 2J` cleared the screen, `ESC ] 0` set the window
title, a CSI of C1 (`\\x9b`) and a `[link=...]` (rich markup) did their own tricks. Now
`worktrain signals`, `issues` and `events` print each control character escaped.

The agent's text enters where its tools write it (the signal stream, the issue sink, the
session's event stream); the CLI runs as a real process on a pseudo-terminal, as a person
would run it, and the bytes the terminal received are checked."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.signals import SignalStream
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import STREAM_FIELD
from daemon.bus.streams.issues import IssueSink
from daemon.schema.events import LlmTurnCompleted
from daemon.schema.issues import Issue
from daemon.schema.signals import Signal
from tests.cli.conftest import TOKEN, Cli

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# clipboard write, clear screen, window title, a C1 CSI, a bidi override, rich markup
HOSTILE = "ok\x1b]52;c;cHduZWQ=\x07 \x1b[2J\x1b]0;pwned\x07 \x9b31m \u202egnp.exe [link=https://evil]x[/link]"
RAW = (b"\x1b]52;", b"\x1b[2J", b"\x1b]0;pwned", "\x9b".encode(), "\u202e".encode(), b"\x1b]8;")


def on_a_terminal(cli: Cli, *args: str) -> bytes:
    """`worktrain ARGS` run with its stdout and stderr on a pty: every byte the terminal got."""
    main, secondary = pty.openpty()
    env = {**os.environ, "WORKTRAIN_URL": cli.url, "WORKTRAIN_API_TOKEN": TOKEN, "PYTHONPATH": ROOT}
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
        env=env,
    )
    os.close(secondary)
    received = bytearray()
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            received += chunk
    finally:
        os.close(main)
        process.wait(30)
    assert process.returncode == 0, bytes(received)
    return bytes(received)


def test_agent_text_reaches_the_terminal_escaped(cli: Cli, real_redis: redis.Redis, tmp_path) -> None:  # type: ignore[no-untyped-def]
    code, body = cli.json("dispatch", "two-step", "look around", "--workspace", str(tmp_path))
    assert code == 0, body
    session_id = body["data"]["sessionId"]
    keys = Keys("wt")
    channel = SteerBus(real_redis, keys).channel(session_id, "test-worker", 30)
    channel.claim()
    turn = channel.start_turn().turn
    SignalStream(real_redis, keys).append(
        channel, Signal(kind="progress", summary=HOSTILE, turnId=turn, sessionId=session_id)
    )
    IssueSink(real_redis, keys, None).record(
        Issue(
            kind="blocked",
            severity="warn",
            summary=HOSTILE,
            suggestedFix=HOSTILE,
            sessionId=session_id,
            turnId=turn,
        )
    )
    event = LlmTurnCompleted(sessionId=session_id, turnId=turn, stopReason="end_turn", text=HOSTILE)
    real_redis.xadd(keys.session(session_id).events, {STREAM_FIELD: event.model_dump_json()})
    for command in (
        ["signals", session_id],
        ["issues", "--session", session_id],
        ["events", "--session", session_id],
    ):
        shown = on_a_terminal(cli, *command)
        assert b"pwned" in shown, (command, shown)  # the text is there ...
        for raw in RAW:
            assert raw not in shown, (command, raw, shown)  # ... its control sequences are not
        assert b"\\x1b]52;c;" in shown and b"\\x9b31m" in shown, (command, shown)


def test_tables_and_json_show_agent_text_escaped(capsys) -> None:  # type: ignore[no-untyped-def]
    from cli.output import print_fields, print_json, print_json_line, print_table

    print_table(("goal",), [(HOSTILE,)])
    print_fields([("goal", HOSTILE)])
    print_json({"goal": HOSTILE})
    print_json_line({"goal": HOSTILE})
    shown = capsys.readouterr().out.encode()
    for raw in RAW:
        assert raw not in shown, (raw, shown)
    assert b"[link=https://evil]x[/link]" in shown  # shown as written, not read as rich markup
