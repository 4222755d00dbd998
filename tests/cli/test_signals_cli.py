"""`worktrain signals ID --follow` on a session that has already ended says how it ended
and exits, rather than long-polling for signals that cannot come (issue 33's polish)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cli.conftest import Cli
from tests.cli.test_commands import dispatch

pytestmark = pytest.mark.unit


def test_following_the_signals_of_a_finished_session_says_so_and_exits(cli: Cli, tmp_path: Path) -> None:
    session_id = dispatch(cli, tmp_path)
    assert cli("cancel", session_id).exit_code == 0  # queued: it ends now, `cancelled`
    started = time.monotonic()
    result = cli("signals", session_id, "--follow")
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - started < 5  # no long poll (25 s) for signals that cannot come
    assert result.stdout == ""
    assert result.stderr.startswith(f"{session_id} has ended (cancelled"), result.stderr
    assert result.stderr.rstrip().endswith("no more signals will come"), result.stderr
    followed = cli("signals", session_id, "--follow", "--json")
    assert followed.exit_code == 0 and followed.stdout == ""  # stdout stays JSON Lines
    assert "has ended (cancelled" in followed.stderr
