"""The command line as an operator meets it in a terminal (issue 45, items 5 and 7), run in a
pseudo-terminal against a real web tier: an id `worktrain top` shortened at 80 columns is taken
back by every command that takes an id (an ambiguous one is an error naming the candidates);
`signals` with none says so; `webhooks` has a header row; no table line ends in padding, on a
terminal or piped; a directory listing's tabs and newlines stay inside `events`' line."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.streams.eventsink import EventSink
from daemon.schema.events import SessionCompleted, ToolCallCompleted
from daemon.schema.webhookpayloads import WebhookRouting
from tests.cli.conftest import ROOT, TOKEN, Cli
from tests.cli.test_commands import dispatch

pytestmark = pytest.mark.processes

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")
LISTING = "Directory . (3 entries; name, kind, size):\nREADME.md\tfile\t18\nsrc\tdir\t-\ntests\tdir\t-"


def env_for(cli: Cli, columns: int) -> dict[str, str]:
    env = {**os.environ, "WORKTRAIN_URL": cli.url, "WORKTRAIN_API_TOKEN": TOKEN, "COLUMNS": str(columns)}
    env.pop("WORKTRAIN_API_TOKEN_FILE", None)
    return env


def in_terminal(cli: Cli, *args: str, columns: int = 80, until: str | None = None) -> tuple[int | None, str]:
    """`worktrain ARGS` on a pty of `columns` columns: (exit code, what the terminal got).
    With `until`, stop reading once that shows (then `q` and wait, for `top`)."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", *args], env=env_for(cli, columns), cwd=ROOT,
        stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True,
    )  # fmt: skip
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if until is not None and until.encode() in seen:
                os.write(primary, b"q")
                until = None
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif process.poll() is not None:
                break
        return process.wait(10), seen.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)


def plain_lines(output: str) -> list[str]:
    return [ANSI.sub("", line).rstrip("\r") for line in output.split("\n")]


def test_an_id_top_shortened_at_80_columns_is_taken_back_and_an_ambiguous_one_is_named(
    cli: Cli, tmp_path: Path
) -> None:
    first, second = dispatch(cli, tmp_path), dispatch(cli, tmp_path)
    code, shown = in_terminal(cli, "top", "--interval", "0.5", columns=80, until="q quits")
    assert code == 0, shown
    row = next(line for line in plain_lines(shown) if second[-12:] in line)
    short = re.search(r"…[0-9A-Z]{12}", row)
    assert short is not None and second not in shown, row
    print("top shows", short.group(), "for", second)

    for args in (("session", short.group()), ("steers", short.group()), ("session", second[:-2].lower())):
        code, out = in_terminal(cli, *args, columns=100)
        print(" ".join(args), "->", code, out.strip().splitlines()[:2])
        assert code == 0 and "is not a session id" not in out, out
    code, out = in_terminal(cli, "session", short.group(), "--json", columns=100)
    assert f'"sessionId": "{second}"' in out, out
    steer = cli("steer", short.group(), "taken back")  # a command that changes state, in-process
    assert steer.exit_code == 0, steer.stderr

    code, out = in_terminal(cli, "session", "sess_0", columns=200)  # the start of every id of this age
    said = " ".join(plain_lines(out))
    print(said)
    assert code == 2 and "is ambiguous" in said and first in said and second in said
    code, out = in_terminal(cli, "session", "ZZZZZZZZZZZZ", columns=200)
    assert code == 2 and "no session id starts or ends with 'ZZZZZZZZZZZZ'" in " ".join(plain_lines(out))


def test_tables_end_their_lines_where_their_text_ends_on_a_terminal_and_piped(
    cli: Cli, tmp_path: Path
) -> None:
    dispatch(cli, tmp_path)
    code, out = in_terminal(cli, "sessions", columns=160)
    assert code == 0, out
    padded = [line for line in plain_lines(out) if line != line.rstrip(" ")]
    assert padded == [], f"{len(padded)} line(s) end in spaces on a terminal: {padded[:3]}"
    piped = subprocess.run(
        [sys.executable, "-m", "cli", "sessions"], env=env_for(cli, 160), cwd=ROOT,
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    padded = [line for line in piped.stdout.splitlines() if line != line.rstrip(" ")]
    assert piped.stdout.strip() and padded == [], f"piped: {padded[:3]}"


def test_signals_with_none_says_so_and_webhooks_have_a_header_row(
    cli: Cli, tmp_path: Path, real_redis: redis.Redis
) -> None:
    session_id = dispatch(cli, tmp_path)
    code, out = in_terminal(cli, "signals", session_id, columns=120)
    assert code == 0 and f"{session_id} has sent no signal yet" in out, repr(out)
    code, out = in_terminal(cli, "signals", columns=120)
    assert code == 0 and "no session has sent a signal yet" in out, repr(out)

    outbox = WebhookOutbox(real_redis, Keys("wt"), WebhookRouting(urls=("http://127.0.0.1:9/hook",)))
    ended = SessionCompleted(sessionId=session_id, status="completed", outcome="workflow_complete")
    outbox.queue_now(session_id, [ended])
    code, out = in_terminal(cli, "webhooks", columns=200)
    lines = [line for line in plain_lines(out) if line.strip()]
    print("\n".join(lines))
    header = next((line for line in lines if "receiver" in line), "")
    assert code == 0 and all(word in header for word in ("event", "session", "state", "tries")), lines
    row = next(line for line in lines if "session.finished" in line)
    assert session_id in row and "http://127.0.0.1:9/hook" in row


def test_a_directory_listing_keeps_its_tabs_inside_its_events_line(
    cli: Cli, tmp_path: Path, real_redis: redis.Redis
) -> None:
    session_id = dispatch(cli, tmp_path)
    done = ToolCallCompleted(
        sessionId=session_id,
        turnId=1,
        toolName="Read",
        toolUseId="toolu_1",
        durationMs=3,
        resultSummary=LISTING,
    )
    EventSink(real_redis, Keys("wt"), None).emit(done)
    code, out = in_terminal(cli, "events", "--session", session_id, columns=120)
    lines = [line for line in plain_lines(out) if line.strip()]
    print("\n".join(lines))
    assert code == 0 and any("tool_call_completed" in line for line in lines), lines
    # every line is an event's line (its clock first): none is a piece of the listing
    strays = [line for line in lines if not re.match(r"^\d\d:\d\d:\d\d ", line)]
    assert strays == [], strays
    assert not any("\t" in line for line in lines)


def test_dispatch_warns_of_an_unknown_model_and_session_shows_the_model_and_the_cost(
    cli: Cli, tmp_path: Path, real_redis: redis.Redis
) -> None:
    """Item 2: `--model gpt-4o` was taken silently and its cost then read '-'; `worktrain
    session ID` showed neither the model nor the cost the README says it shows."""
    (tmp_path / "ws").mkdir()
    dispatched = cli("dispatch", "two-step", "look", "--workspace", str(tmp_path / "ws"), "--model", "gpt-4o")
    assert dispatched.exit_code == 0, dispatched.stderr
    assert "warning: model 'gpt-4o' is not in the price table" in dispatched.stderr, dispatched.stderr
    session_id = dispatched.stdout.strip()
    real_redis.hset(f"wt:session:{{{session_id}}}", mapping={"inputTokens": 3, "outputTokens": 40})
    shown = cli("session", session_id).stdout
    print(shown)
    assert re.search(r"model\s+gpt-4o", shown) and "unknown (gpt-4o is not in the price table)" in shown
    model = ("--model", "claude-sonnet-4-5", "--thinking-budget", "2048", "--max-output-tokens", "8192")
    known = cli("dispatch", "two-step", "look", "--workspace", str(tmp_path / "ws"), *model)
    assert known.exit_code == 0 and "warning" not in known.stderr, known.stderr
    session_id = known.stdout.strip()
    real_redis.hset(f"wt:session:{{{session_id}}}", mapping={"outputTokens": 40, "costUsd": "0.000600"})
    shown = cli("session", session_id).stdout
    assert "claude-sonnet-4-5 · thinking 2,048 tokens · max output 8,192 tokens" in shown, shown
    assert re.search(r"cost\s+\$0\.000600", shown), shown
