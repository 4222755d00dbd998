"""The README and docs/redis.md keep up with the code: every setting, exit code and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import AliasChoices

from cli.client import ExitCode
from daemon.bus.keys import Keys, SessionKeys
from daemon.host.config import Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
REDIS_DOC = (ROOT / "docs" / "redis.md").read_text()
SPEC_8 = [
    "REDIS_URL",
    "WORKTRAIN_DATA_DIR",
    "WORKTRAIN_API_TOKEN",
    "WORKTRAIN_BIND",
    "WORKTRAIN_PORT",
    "WORKTRAIN_URL",
    "WORKTRAIN_MODEL",
    "WORKTRAIN_WORKFLOWS_DIR",
    "WORKTRAIN_IDLE_WAIT_SECONDS",
    "WORKTRAIN_REDIS_PREFIX",
    "WORKTRAIN_LEASE_SECONDS",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
]


def env_name(field: str) -> str:
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return f"WORKTRAIN_{field.upper()}"


def table_rows(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the markdown table under `header`, keyed by their first cell."""
    section = text[text.index(header) :]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("| ---"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_two_setup_commands_come_first():
    first_block = README.split("```")[1]
    assert "./scripts/run" in first_block and "./scripts/test" in first_block
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test" in ci


def test_configuration_table_lists_every_setting_and_every_spec_variable_with_its_default(monkeypatch):
    for field in Settings.model_fields:
        monkeypatch.delenv(env_name(field), raising=False)
    rows = table_rows(README, "## Configuration")
    names = {env_name(field) for field in Settings.model_fields}
    assert set(SPEC_8) <= names, "daemon/host/config.py lost a README's Configuration variable"
    assert names == set(rows) - {"variable"}
    defaults = {
        "WORKTRAIN_BIND": "127.0.0.1",
        "WORKTRAIN_PORT": "3456",
        "WORKTRAIN_URL": "http://127.0.0.1:3456",
        "WORKTRAIN_MODEL": "claude-sonnet-4-5",
        "WORKTRAIN_IDLE_WAIT_SECONDS": "120",
        "WORKTRAIN_REDIS_PREFIX": "wt",
        "WORKTRAIN_LEASE_SECONDS": "30",
        "WORKTRAIN_RETENTION_DAYS": "7",
        "WORKTRAIN_DATA_DIR": "~/.worktrain",
        "WORKTRAIN_MODEL_RETRY_SECONDS": "600",
        "WORKTRAIN_MAX_MODEL_CALLS": "0",
        "WORKTRAIN_CONTEXT_TOKENS": "200000",
        "WORKTRAIN_COMPACT_AT": "0.8",
    }
    settings = Settings()
    for name, default in defaults.items():
        assert f"`{default}`" in rows[name][0], name
        field = next(f for f in Settings.model_fields if env_name(f) == name)
        value = getattr(settings, field)
        if name != "WORKTRAIN_DATA_DIR":
            assert str(value).removesuffix(".0") == default, name


def test_exit_code_table_matches_the_code():
    rows = table_rows(README, "| code | meaning |")
    assert {int(code) for code in rows if code.isdigit()} == {int(code) for code in ExitCode}


def test_redis_doc_names_every_key():
    keys = Keys("wt")
    session = keys.session("sess_01JD0000000000000000000000")
    for name in SessionKeys.__slots__:
        key = getattr(session, name).replace("sess_01JD0000000000000000000000", "ID")
        assert f"`{key}`" in REDIS_DOC, key
    for key in (keys.sessions, keys.active, keys.issues, keys.events, keys.reaper_lock, "rq:queue:worktrain"):
        assert f"`{key}`" in REDIS_DOC, key


def test_the_up_row_names_every_option_of_up():
    from cli.up import up_command

    row = next(line for line in README.splitlines() if line.startswith("| `worktrain up "))
    for param in up_command.params:
        for flag in param.opts:
            if flag.startswith("--"):
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", row), flag


def test_ups_stop_order_is_the_readmes():
    from cli.up import stop_order

    said = stop_order({"fakeModelUrl": "http://x", "embeddedRedis": True})
    assert said == (
        "the workers (a running session is handed over), then the web tier, then the fake model, "
        "then Redis (AOF flushed)"
    )
    assert "stops the workers (a running session is handed over and\nresumes" in README
    assert "then the web tier, then the fake model, then Redis (AOF flushed)" in README


def test_the_readme_and_docs_stand_alone():
    """A clone has no ../shared: no document points there."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = " ".join(path.read_text().split())
        assert "../shared" not in text and "shared/SPEC" not in text and "SEMANTICS.md" not in text, path
        assert "SPEC §" not in text and "SEMANTICS §" not in text, path  # a section of a file a clone lacks


@pytest.mark.processes  # runs the documented receiver as a program
def test_the_operations_receiver_prints_what_each_event_is_about(tmp_path: Path) -> None:
    """docs/operations.md's receiver, run as written (on a free port): for `issue.reported` it
    printed "None" (it looked for `status` or `question` only; issue 45)."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    from daemon.host.embedded_redis import free_port
    from daemon.schema.webhookpayloads import WebhookPayload, headers

    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc[doc.index("### A receiver that checks the signature") :]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    port = free_port()
    assert "8765" in code
    script = tmp_path / "receiver.py"
    script.write_text(code.replace("8765", str(port)))
    secret = "receiver-test-secret"
    env = {**os.environ, "WORKTRAIN_WEBHOOK_SECRET": secret}
    receiver = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        common = {"at": "2026-01-01T00:00:00Z", "sessionId": "sess_01JD0000000000000000000000",
                  "workflowId": "two-step", "goal": "g"}  # fmt: skip
        payloads = [
            WebhookPayload(type="issue.reported", id="d1", **common,
                           issue={"kind": "bug", "severity": "warn", "summary": "The tests are flaky"}),
            WebhookPayload(type="session.finished", id="d2", **common, status="completed"),
        ]  # fmt: skip
        for payload in payloads:
            body = payload.model_dump_json(exclude_none=True).encode()
            sent = headers(payload.type, payload.id, body, secret)
            request = urllib.request.Request(f"http://127.0.0.1:{port}/", body, sent, method="POST")
            deadline = time.monotonic() + 10
            while True:
                try:
                    with urllib.request.urlopen(request, timeout=5) as answer:
                        assert answer.status == 204
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        assert receiver.stdout is not None
        printed = [receiver.stdout.readline().strip() for _ in payloads]
        print("\n".join(printed))
        assert "The tests are flaky" in printed[0] and "None" not in printed[0], printed[0]
        assert printed[1].endswith("completed"), printed[1]
    finally:
        receiver.kill()
        receiver.wait()
