"""The help a new user reads (issue 33): exit codes 10/11 and "JSON Lines when following" only
on the commands they apply to, `--workspace DIR`, and `worker --help` saying REDIS_URL's default."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import main

pytestmark = pytest.mark.unit


def help_of(*command: str) -> str:
    result = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_wait_exit_codes_and_json_lines_only_where_they_apply() -> None:
    assert "11 still pending" in help_of("steer") and "10 not delivered" in help_of("steer")
    for command in ("session", "cancel", "dispatch", "sessions"):
        text = help_of(command)
        assert "10 not delivered" not in text and "11 still pending" not in text, command
        assert "JSON Lines" not in text, command
    for command in ("events", "issues", "signals", "steers"):
        assert "JSON Lines when following" in help_of(command), command


def test_dispatch_and_worker_say_what_they_take() -> None:
    assert "--workspace DIR" in help_of("dispatch") or "-w, --workspace DIR" in help_of("dispatch")
    worker = help_of("worker")
    assert "Needs REDIS_URL" not in worker and "default redis://127.0.0.1:6379/0" in worker


def test_mcp_help_names_every_tool_it_serves() -> None:
    from cli.mcpserver import READ_TOOLS, WRITE_TOOLS

    text = help_of("mcp")
    missing = [tool for tool in (*WRITE_TOOLS, *READ_TOOLS) if tool not in text]
    assert missing == [], f"mcp --help omits {missing}"
