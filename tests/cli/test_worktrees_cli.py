"""The workspace options of `worktrain dispatch` and `worktrain worktrees [--prune]` (README's Coding
sessions) against a real `worktrain web` and redis-server, on a git repository made here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli.client import ExitCode
from tests.agent.conftest import make_worktree
from tests.cli.conftest import Cli

pytestmark = pytest.mark.unit

GONE = "sess_01JD0000000000000000000000"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "initial")
    return repo


def test_dispatch_takes_the_workspace_options(cli: Cli, tmp_path: Path) -> None:
    options = ["--branch-strategy", "worktree", "--delivery", "push", "--base-ref", "main~0"]
    options += ["--branch", "feature/x", "--keep-worktree"]
    code, body = cli.json("dispatch", "two-step", "g", "--workspace", str(make_repo(tmp_path)), *options)
    assert code == 0, body
    _, shown = cli.json("session", body["data"]["sessionId"])
    data = shown["data"]
    assert (data["branchStrategy"], data["deliveryMode"], data["baseRef"], data["branch"]) == (
        "worktree", "push", "main~0", "feature/x",
    )  # fmt: skip
    assert data["keepWorktree"] is True and data["delivery"] is None


def test_a_worktree_dispatch_outside_a_repository_is_refused_before_sending(
    cli: Cli, worker_here: object, tmp_path: Path
) -> None:
    """Issue 33: `up`'s workers see this host's files, so the CLI checks the folder like it
    checks it exists."""
    result = cli("dispatch", "two-step", "g", "--workspace", str(tmp_path), "--branch-strategy", "worktree")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "is not in a git repository" in result.stderr and "git init" in result.stderr, result.stderr
    code, body = cli.json("sessions")
    assert code == 0 and body["data"]["totalCount"] == 0, body


def test_dispatch_refuses_a_branch_that_is_an_option_or_a_range(cli: Cli, tmp_path: Path) -> None:
    for branch in ("-x", "a..b"):
        code, body = cli.json("dispatch", "two-step", "g", "--workspace", str(tmp_path), "--branch", branch)
        assert code == ExitCode.BAD_REQUEST and "branch" in body["error"], body
    result = cli("dispatch", "two-step", "g", "--workspace", str(tmp_path), "--branch-strategy", "sideways")
    assert result.exit_code == ExitCode.USAGE


def test_worktrees_lists_and_prunes_those_of_sessions_no_longer_live(cli: Cli, tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    code, body = cli.json(
        "dispatch", "two-step", "g", "--workspace", str(repo), "--branch-strategy", "worktree"
    )
    live = body["data"]["sessionId"]
    for sid in (live, GONE):  # as a worker would have made them
        make_worktree(repo, sid, f"worktrain/{sid}")
    code, listed = cli.json("worktrees", str(repo))
    assert code == 0
    assert {(w["sessionId"], w["status"]) for w in listed["worktrees"]} == {
        (live, "queued"),
        (GONE, "unknown"),
    }
    result = cli("worktrees", str(repo), "--prune", "--json")
    code, pruned = result.exit_code, json.loads(result.stdout)
    assert code == 0
    removed = {w["sessionId"]: w["removed"] for w in pruned["worktrees"]}
    assert removed == {live: False, GONE: True}, result.stderr
    assert not (repo / ".worktrain" / "worktrees" / GONE).exists()
    assert (repo / ".worktrain" / "worktrees" / live).is_dir()
    assert git(repo, "rev-parse", "--verify", f"worktrain/{GONE}")  # the branch stays
    assert git(repo, "status", "--porcelain") == ""
    text = cli("worktrees", str(repo)).stdout
    assert live in text and "queued" in text and GONE not in text
    header = next(line for line in text.splitlines() if "session" in line and "status" in line)
    assert "branch" in header and "path" in header, text  # issue 33: a header row
