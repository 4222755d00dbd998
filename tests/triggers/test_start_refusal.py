"""A triggers file with a problem stops `worktrain web`, `worktrain worker` and `worktrain up`
before they serve or take work, each problem said as `file:line: field: what` (README's
Triggers): an unknown field, a bad template, a missing secret variable. Real processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daemon.host.embedded_redis import free_port
from tests.web.conftest import FIXTURE_WORKFLOWS

pytestmark = pytest.mark.processes  # the tier (tests/tiers.py on the tiers branch)

ENTRY = """\
- id: fix-issues
  source: github
  mode: webhook
  events: [issues.labeled]
  secretEnv: TEST_REFUSAL_SECRET
  tokenEnv: TEST_REFUSAL_TOKEN
  workflowId: two-step
  goal: "Fix #{{ issue.number }}"
  workspacePath: WORKSPACE
  reportBack: comment
"""


def run(tmp: Path, text: str, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "triggers.yml"
    path.write_text(textwrap.dedent(text).replace("WORKSPACE", str(tmp / "repo")))
    environ = {
        **os.environ,
        "WORKTRAIN_TRIGGERS_FILE": str(path),
        "WORKTRAIN_DATA_DIR": str(tmp / "data"),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing there: it must stop before Redis
        "HOME": str(tmp),
        "TEST_REFUSAL_SECRET": "s3cret-value",
        "TEST_REFUSAL_TOKEN": "t0ken-value",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], env=environ, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_web_refuses_an_unknown_field(tmp_path: Path) -> None:
    done = run(
        tmp_path,
        ENTRY.replace("  reportBack: comment", "  reportBak: comment"),
        ["web", "--port", str(free_port())],
    )
    assert done.returncode == 1, done.stderr
    assert f"{tmp_path / 'triggers.yml'}:10: fix-issues.reportBak: unknown field" in done.stderr


def test_worker_refuses_a_bad_template(tmp_path: Path) -> None:
    done = run(tmp_path, ENTRY.replace('"Fix #{{ issue.number }}"', '"Fix #{{ issue.number"'), ["worker"])
    assert done.returncode == 1, done.stderr
    assert f"{tmp_path / 'triggers.yml'}:8: fix-issues.goal: bad template" in done.stderr


def test_up_refuses_a_missing_secret_variable_and_never_prints_a_value(tmp_path: Path) -> None:
    done = run(tmp_path, ENTRY, ["up", "--port", str(free_port()), "--model", "fake"], TEST_REFUSAL_SECRET="")
    assert done.returncode == 1, done.stderr
    assert (
        f"{tmp_path / 'triggers.yml'}:5: fix-issues.secretEnv: the variable TEST_REFUSAL_SECRET is not set"
        in done.stderr
    )
    assert "t0ken-value" not in done.stdout + done.stderr
    assert not (tmp_path / "data" / "redis").exists()  # nothing was started


def test_each_tier_checks_what_it_needs(tmp_path: Path) -> None:
    """The web holds webhook secrets, a worker API tokens: each refuses only for its own (a
    worker without the webhook secret gets as far as Redis, which is not there)."""
    no_secret = run(tmp_path, ENTRY, ["worker"], TEST_REFUSAL_SECRET="")
    assert no_secret.returncode == 1 and "not reachable" in no_secret.stderr
    assert "TEST_REFUSAL_SECRET" not in no_secret.stderr
    missing = run(tmp_path, ENTRY, ["worker"], TEST_REFUSAL_TOKEN="")
    assert missing.returncode == 1
    assert ":6: fix-issues.tokenEnv: the variable TEST_REFUSAL_TOKEN is not set" in missing.stderr
