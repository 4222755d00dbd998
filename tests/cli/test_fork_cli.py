"""`worktrain fork ID --turn N [-m TEXT] [--model M]` (README's "Fork a session") against a real
`worktrain web` and redis-server: the fork's id alone on stdout, its record as asked, and the
exit codes of a refusal (8: unknown turn; 5: unknown session; 6: no journal)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from cli.client import ExitCode
from daemon.bus.keys import Keys
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.fakemodel import ScriptedModel, reply, tool
from tests.agent.conftest import NOTES, Harness
from tests.cli.conftest import Cli

pytestmark = pytest.mark.unit


def ran(real_redis: redis.Redis, tmp_path: Path) -> str:
    """A session of two-step run to its end in this process, on the web tier's Redis."""
    keys = Keys("wt")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# cli\n")
    harness = Harness(
        SteerBus(real_redis, keys), SessionRegistry(real_redis, keys), workspace, tmp_path / "d"
    )
    sid = harness.create()
    turns = [reply(tool("Read", path="README.md")), *[reply(tool("continue_workflow", notes=NOTES))] * 2]
    assert harness.run(ScriptedModel(turns)) == "workflow_complete"
    return sid


def test_fork_prints_the_forks_id_and_the_record_says_what_was_asked(
    cli: Cli, real_redis: redis.Redis, tmp_path: Path
) -> None:
    source = ran(real_redis, tmp_path)
    result = cli("fork", source, "--turn", "1", "-m", "Read it twice.", "--model", "claude-other")
    assert result.exit_code == 0, result.output
    fork_id = result.stdout.strip()
    assert fork_id.startswith("sess_") and len(fork_id) == 31
    assert f"a fork of {source} after turn 1" in result.stderr and "conversation only" in result.stderr
    code, body = cli.json("session", fork_id)
    data = body["data"]
    assert code == 0 and data["forkOf"]["sessionId"] == source and data["forkOf"]["turn"] == 1
    assert data["agentConfig"]["model"] == "claude-other" and data["pendingSteers"] == 1
    _, source_body = cli.json("session", source)
    assert [f["sessionId"] for f in source_body["data"]["forks"]] == [fork_id]
    assert f"{fork_id} (turn 1)" in cli("session", source).stdout  # the readable summary, both ways
    assert f"{source} after turn 1" in cli("session", fork_id).stdout


def test_a_fork_refused_exits_with_the_codes_of_its_status(
    cli: Cli, real_redis: redis.Redis, tmp_path: Path
) -> None:
    source = ran(real_redis, tmp_path)
    unknown_turn = cli("fork", source, "--turn", "9", "-m", "x")
    assert unknown_turn.exit_code == ExitCode.BAD_REQUEST and "400 unknown_turn" in unknown_turn.stderr
    missing = cli("fork", "sess_01JD0000000000000000000000", "--turn", "1")
    assert missing.exit_code == ExitCode.NOT_FOUND
    real_redis.delete(Keys("wt").turns_of(source))
    gone = cli("fork", source, "--turn", "1", "-m", "x")
    assert gone.exit_code == ExitCode.CONFLICT and "409 journal_gone" in gone.stderr
    assert cli("fork", source).exit_code == ExitCode.USAGE  # --turn is required
