"""Client commands start fast: structurally, they import neither the anthropic SDK nor rq nor
flask (nor redis-py or pydantic), and rich only when they print a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cli.client import SESSION_ID_RE
from daemon.host.ids import SESSION_ID_RE as DAEMON_SESSION_ID_RE
from tests.cli.conftest import TOKEN

pytestmark = pytest.mark.unit

HEAVY = (
    "anthropic",
    "rq",
    "flask",
    "redis",
    "pydantic",
    "pydantic_settings",
    "gunicorn",
    "granian",
    "ulid",
    "werkzeug",
)

PROBE = """
import json, sys
from cli.main import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
top = sorted({name.split(".")[0] for name in sys.modules})
print("MODULES=" + json.dumps(top))
"""


def loaded_modules(*args: str, url: str) -> set[str]:
    env = {**os.environ, "WORKTRAIN_URL": url, "WORKTRAIN_API_TOKEN": TOKEN}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=30, check=True
    ).stdout
    line = next(line for line in out.splitlines() if line.startswith("MODULES="))
    return set(json.loads(line.removeprefix("MODULES=")))


def test_steer_imports_no_heavy_module(web_process, cli, tmp_path):
    session_id = cli("dispatch", "two-step", "g", "--workspace", str(tmp_path)).stdout.strip()
    modules = loaded_modules("steer", session_id, "hello", url=web_process.url)
    assert "cli" in modules and "click" in modules
    assert not modules.intersection(HEAVY), modules.intersection(HEAVY)
    assert "rich" not in modules  # one line of output: no table library


def test_table_commands_import_rich_but_nothing_heavy(web_process, cli):
    modules = loaded_modules("sessions", url=web_process.url)
    assert "rich" in modules
    assert not modules.intersection(HEAVY), modules.intersection(HEAVY)


@pytest.mark.processes
def test_help_and_an_unreachable_server_import_nothing_heavy():
    modules = loaded_modules("--help", url="http://127.0.0.1:9")
    assert not modules.intersection(HEAVY)
    modules = loaded_modules("events", "--follow", url="http://127.0.0.1:9")
    assert not modules.intersection(HEAVY)


def test_the_cli_session_id_pattern_is_the_daemons():
    assert SESSION_ID_RE.pattern == DAEMON_SESSION_ID_RE.pattern
