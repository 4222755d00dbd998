"""`worktrain workers` and `worktrain top` against a real stack (web, worker, Redis, the fake
model): `top` runs in a pseudo-terminal, shows the live session after one refresh, and `q`
ends it with exit code 0."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.crash.harness import ROOT, TOKEN, Stack, stacks, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    yield from stacks(tmp_path, Stack)


def client_env(stack: Stack) -> dict[str, str]:
    return {**os.environ, "WORKTRAIN_URL": stack.url, "WORKTRAIN_API_TOKEN": TOKEN, "COLUMNS": "160"}


def read_until(fd: int, wanted: str, timeout: float = 20.0) -> str:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted.encode() not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{wanted!r} not shown; the terminal had:\n{seen.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return seen.decode(errors="replace")


def test_workers_and_top_show_the_live_fleet(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(concurrency=2).start()
    stack.model.hold_when = lambda sid, n: n == 1
    sid = stack.dispatch()
    wait_until(lambda: stack.model.held(sid), "the session's first call, held")
    assert stack.steer(sid, "look at the tests first").status == 200

    def workers() -> list[dict[str, object]]:
        listed = subprocess.run(
            [sys.executable, "-m", "cli", "workers", "--json"], env=client_env(stack), cwd=ROOT,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        return list(json.loads(listed.stdout)["data"]["workers"])

    # a worker publishes what it runs once a second
    [worker] = wait_until(lambda: (w := workers()) and w[0]["sessions"] and w, "the worker's session listed")
    assert worker["sessions"] == [sid] and worker["concurrency"] == 2

    primary, secondary = pty.openpty()
    top = subprocess.Popen(
        [sys.executable, "-m", "cli", "top", "--interval", "0.5"], env=client_env(stack), cwd=ROOT,
        stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True,
    )  # fmt: skip
    os.close(secondary)
    try:
        shown = read_until(primary, sid[:20])
        assert "sessions by status" in shown and "steers/min" in shown
        os.write(primary, b"q")
        assert top.wait(10) == 0
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
        os.close(primary)
        stack.model.release(sid)


def pty_of(columns: int) -> tuple[int, int]:
    import fcntl
    import struct
    import termios

    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    return primary, secondary


def test_top_at_80_columns_keeps_status_turn_and_step(make_stack: Callable[..., Stack]) -> None:
    """Issue 33: at 80 columns `top` showed the full session id and dropped status, turn and
    step; `--once` said "q quits"; an empty table showed nothing."""
    stack = make_stack(concurrency=2).start()
    env = {**client_env(stack), "COLUMNS": "80"}
    once = subprocess.run(
        [sys.executable, "-m", "cli", "top", "--once"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert once.returncode == 0, once.stderr
    assert "(none)" in once.stdout and "q quits" not in once.stdout, once.stdout
    stack.model.hold_when = lambda sid, n: n == 1
    sid = stack.dispatch()
    wait_until(lambda: stack.model.held(sid), "the session's first call, held")
    primary, secondary = pty_of(80)
    top = subprocess.Popen(
        [sys.executable, "-m", "cli", "top", "--interval", "0.5"], env=env, cwd=ROOT,
        stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True,
    )  # fmt: skip
    os.close(secondary)
    try:
        shown = read_until(primary, sid[-12:])
        shown += read_until(primary, "q quits")
        row = next(line for line in shown.splitlines() if sid[-12:] in line)
        print(row)
        assert sid not in shown, "the full id leaves no room at 80 columns"
        assert "running" in row and " 1 " in row and "1/4" in row, row  # crash-four: step 1 of 4
        os.write(primary, b"q")
        assert top.wait(10) == 0
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
        os.close(primary)
        stack.model.release(sid)
