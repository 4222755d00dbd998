"""`worktrain up` is never open (issue 21, H2; docs/security.md). The finding: with no token (up's
default), an agent's Bash — plain HTTP to 127.0.0.1 — listed every session, read another
session's goal, steered it, cancelled it, and dispatched a session whose workspace was the
data dir. Now `up` always has a token, kept owner-only in its data dir: another local
process without it is refused everything, while the CLI and the console link just work."""

from __future__ import annotations

import http.client
import json
import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.client import up_token
from daemon.host.apitoken import load_or_create_token, read_token
from daemon.host.bind import token_problem
from tests.agent.procscan import environ_and_cmdline
from tests.cli.test_e2e import WORKFLOW, banner_field, launch_up, worktrain_argv

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def plain_http(
    port: int, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    """What the agent did: a request to 127.0.0.1 from another process, JSON and all."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[dict[str, Any]]:
    yield from launch_up(tmp_path, ["--workers", "1", "--fake-latency", "0.2"])


def worktrain(up: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """A client command as a user types it: no token, no URL, just the data dir's `up`."""
    return subprocess.run(
        [*worktrain_argv(), *args], env=up["env"], capture_output=True, text=True, timeout=60, cwd=up["tmp"]
    )


def test_up_refuses_every_other_local_process_and_the_cli_just_works(up: dict[str, Any]) -> None:
    port, data_dir, tmp = up["port"], up["data_dir"], up["tmp"]
    token_path = data_dir / "api-token"
    token = token_path.read_text().strip()
    assert stat.S_IMODE(token_path.stat().st_mode) == 0o600 and len(token) >= 43
    assert token not in (data_dir / "up.json").read_text()

    # The CLI finds `up` and its token by itself (the README's commands, unchanged).
    workspace = tmp / "victim"
    workspace.mkdir()
    dispatched = worktrain(up, "dispatch", WORKFLOW, "Victim's secret goal", "--workspace", str(workspace))
    assert dispatched.returncode == 0, dispatched.stderr
    sid = dispatched.stdout.strip().splitlines()[0]
    assert sid.startswith("sess_")

    # Another local process, without the token: nothing at all.
    base = "/api/v2"
    attacks = [
        ("GET", f"{base}/sessions", None),
        ("GET", f"{base}/sessions/{sid}", None),
        ("POST", f"{base}/sessions/{sid}/steer", {"text": "INJECTED BY OTHER AGENT"}),
        ("POST", f"{base}/sessions/{sid}/cancel", None),
        (
            "POST",
            f"{base}/auto/dispatch",
            {"workflowId": WORKFLOW, "goal": "x", "workspacePath": str(data_dir)},
        ),
    ]
    for method, path, body in attacks:
        status, answer = plain_http(port, method, path, body)
        assert (status, answer.get("code")) == (401, "unauthorized"), (method, path, answer)
        assert "secret goal" not in json.dumps(answer)
    journal = worktrain(up, "steers", sid, "--json")
    assert "INJECTED" not in journal.stdout and journal.returncode == 0, journal.stderr

    # Even with the token, the data dir is no workspace (the finding read the Redis password so).
    into_data = {"workflowId": WORKFLOW, "goal": "x", "workspacePath": str(data_dir)}
    status, answer = plain_http(port, "POST", f"{base}/auto/dispatch", into_data, token)
    assert (status, answer["code"]) == (400, "workspace_not_allowed")

    # The console link carries the token in its fragment only; `worktrain console` prints the same.
    banner = (tmp / "up.out").read_text()
    assert banner_field(banner, "console") == f"http://127.0.0.1:{port}/#token={token}"
    console = worktrain(up, "console", "--print")
    assert console.returncode == 0 and console.stdout.strip() == f"http://127.0.0.1:{port}/#token={token}"

    # No worker holds the token (docs/security.md): in no environ or argv, nor in their memory's
    # reach (non-dumpable) — only `up` and the web tier hold it.
    children = json.loads((data_dir / "up.json").read_text())["children"]
    for pid in children.values():
        assert token.encode() not in environ_and_cmdline(pid)

    process: subprocess.Popen[bytes] = up["process"]
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 0


def test_the_token_is_generated_once_per_data_dir_owner_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = load_or_create_token(data_dir)
    assert load_or_create_token(data_dir) == first == read_token(data_dir)  # a restart keeps it
    assert stat.S_IMODE((data_dir / "api-token").stat().st_mode) == 0o600
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert token_problem(first) is None


def test_the_cli_sends_ups_token_only_to_that_up(tmp_path: Path) -> None:
    """An `up.json` naming another URL (or an explicit WORKTRAIN_URL elsewhere) gets no token."""
    data_dir = tmp_path / "data"
    token = load_or_create_token(data_dir)
    (data_dir / "up.json").write_text(json.dumps({"pid": os.getpid(), "apiUrl": "http://127.0.0.1:3999"}))
    assert up_token("http://127.0.0.1:3999", data_dir) == token
    assert up_token("http://127.0.0.1:4000", data_dir) is None
    (data_dir / "up.json").write_text(
        json.dumps({"pid": os.getpid(), "apiUrl": "http://attacker.example:80"})
    )
    assert up_token("http://attacker.example:80", data_dir) is None  # never off this machine
