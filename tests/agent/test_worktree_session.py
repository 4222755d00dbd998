"""Worktree sessions in process (README's Coding sessions): the runner with a scripted model on a real git
repository — the worktree made and used, the main checkout untouched, delivery committed
(and pushed to a bare repository), partial on failure, the ledger resumed. The same with
real processes and kill -9 is in tests/e2e/test_worktrees.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from daemon.bus.session.registry import NewSession
from daemon.fakemodel import ScriptedModel
from daemon.fakemodel.script import reply, text, tool
from daemon.sandbox import namespaces
from daemon.schema.workspace import WorkspacePlan
from daemon.session.runner import run_session
from daemon.workspaces.delivery import DeliverySettings
from daemon.workspaces.worktree import Made, list_worktrees, staging_path, worktree_path
from tests.agent.conftest import NOTES, Harness, git, make_repo, make_worktree

pytestmark = pytest.mark.processes

AUTHOR = "Test Bot <bot@example.com>"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def create(harness: Harness, repo: Path, **plan: Any) -> str:
    harness.session_id = harness.registry.create(
        NewSession(
            workflowId="two-step",
            goal="Raise VALUE to 2\n\nThe app needs a bigger value.",
            workspacePath=str(repo),
            stepCount=2,
            firstStepId="look",
            workspace=WorkspacePlan(branchStrategy="worktree", **plan),
        )
    )
    return harness.session_id


def editing_model() -> ScriptedModel:
    return ScriptedModel(
        [
            reply(
                text("Reading."),
                tool("Read", path="app.py"),
                tool("Bash", command="pwd; git branch --show-current"),
            ),
            reply(tool("Edit", path="app.py", old_string="VALUE = 1", new_string="VALUE = 2")),
            reply(tool("continue_workflow", notes=NOTES)),
            reply(
                tool("continue_workflow", notes="Raised VALUE to 2 in app.py; nothing else needed changing.")
            ),
        ]
    )


def test_a_worktree_session_works_on_its_branch_and_delivers_a_commit(harness: Harness, repo: Path) -> None:
    sid = create(harness, repo)
    status_before = git(repo, "status", "--porcelain")
    model = editing_model()
    services = harness.services(model)
    services.delivery = DeliverySettings(author=AUTHOR)
    assert run_session(sid, services) == "workflow_complete"
    tree = repo / ".worktrain" / "worktrees" / sid
    bash_result = model.requests[1].messages[-1].content[1]
    assert str(tree) in bash_result.content and f"worktrain/{sid}" in bash_result.content  # type: ignore[union-attr]
    assert (repo / "app.py").read_text() == "VALUE = 1\n"  # the main checkout never written
    assert git(repo, "status", "--porcelain") == status_before == ""
    assert git(repo, "show", f"worktrain/{sid}:app.py") == "VALUE = 2"
    subject, body = git(repo, "log", "-1", "--format=%s%n%an <%ae>", f"worktrain/{sid}").split("\n", 1)
    assert subject == "Raise VALUE to 2" and body == AUTHOR
    message = git(repo, "log", "-1", "--format=%B", f"worktrain/{sid}")
    assert "Raised VALUE to 2 in app.py" in message and f"WorkTrain-Session: {sid}" in message
    delivery = harness.record().delivery
    assert delivery.state == "delivered" and delivery.commits == 1 and not delivery.pushed
    assert delivery.headCommit == git(repo, "rev-parse", f"worktrain/{sid}")
    assert delivery.baseRef == "HEAD" and delivery.baseCommit == git(repo, "rev-parse", f"worktrain/{sid}~1")
    assert "app.py" in delivery.diffStat and delivery.worktree is None
    assert not tree.exists() and list_worktrees(repo) == []  # removed; the branch stays
    assert harness.events.of("session_delivered")[0].state == "delivered"
    assert "/.worktrain/" in (repo / ".git" / "info" / "exclude").read_text()


def test_push_delivery_reaches_a_bare_remote_and_keep_worktree_keeps_it(
    harness: Harness, repo: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    git(repo, "remote", "add", "origin", str(bare))
    sid = create(harness, repo, deliveryMode="push", keepWorktree=True, branch="feature/value")
    services = harness.services(editing_model())
    assert run_session(sid, services) == "workflow_complete"
    assert git(bare, "show", "feature/value:app.py") == "VALUE = 2"
    delivery = harness.record().delivery
    assert delivery.pushed and delivery.remote == "origin" and delivery.branch == "feature/value"
    assert delivery.worktree == str(repo / ".worktrain" / "worktrees" / sid)
    assert [w.branch for w in list_worktrees(repo)] == ["feature/value"]


def test_a_failed_session_is_delivered_partial(harness: Harness, repo: Path) -> None:
    sid = create(harness, repo)
    model = ScriptedModel(
        [
            reply(tool("Write", path="half.txt", content="half done\n")),
            reply(tool("report_issue", kind="blocked", severity="fatal", summary="cannot go on")),
            reply(
                tool(
                    "continue_workflow", notes="Blocked: the build needs a service I cannot reach from here."
                )
            ),
        ]
    )
    outcome = run_session(sid, harness.services(model))
    record = harness.record()
    assert record.status == "failed", outcome
    assert record.delivery.state == "partial" and record.delivery.commits == 1
    assert git(repo, "show", f"worktrain/{sid}:half.txt") == "half done"
    assert git(repo, "log", "-1", "--format=%s", f"worktrain/{sid}").startswith("[partial] Raise VALUE")


def test_not_a_repository_fails_the_session_with_workspace_error(harness: Harness, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    sid = create(harness, plain)
    assert run_session(sid, harness.services(ScriptedModel([]))) == "workspace_error"
    assert "not in a git repository" in (harness.record().outcomeDetail or "")


def test_the_read_ledger_is_checkpointed_and_resumed(harness: Harness, repo: Path) -> None:
    """Read in one attempt, Edit in the next (the worker stopped between): the mark holds;
    a file changed meanwhile is refused."""
    sid = harness.registry.create(
        NewSession(workflowId="two-step", goal="g", workspacePath=str(repo), stepCount=2, firstStepId="look")
    )
    harness.session_id = sid
    stop = {"now": False}

    def read_then_stop(_request: Any) -> Any:
        stop["now"] = True
        return reply(tool("Read", path="app.py"))

    assert (
        run_session(sid, harness.services(ScriptedModel([read_then_stop])), lambda: stop["now"]) == "released"
    )
    marks = json.loads(harness.bus.client.hget(harness.bus.keys.session(sid).record, "readFiles"))
    assert list(marks) == ["app.py"]
    resumed = ScriptedModel(
        [
            reply(tool("Edit", path="app.py", old_string="VALUE = 1", new_string="VALUE = 3")),
            reply(tool("continue_workflow", notes=NOTES)),
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )
    assert run_session(sid, harness.services(resumed, worker_id="w2")) == "workflow_complete"
    assert (repo / "app.py").read_text() == "VALUE = 3\n"


@pytest.mark.skipif(not namespaces.isolation()[0].namespaced, reason="no mount namespace on this host")
def test_a_read_only_session_reads_but_writes_nothing(harness: Harness, repo: Path) -> None:
    sid = create(harness, repo)
    harness.bus.client.hset(harness.bus.keys.session(sid).record, "branchStrategy", "read-only")
    model = ScriptedModel(
        [
            reply(
                tool("Read", path="app.py", tool_id="read"),
                tool("Write", path="app.py", content="VALUE = 9\n", tool_id="write"),
                tool("Edit", path="app.py", old_string="VALUE = 1", new_string="VALUE = 9", tool_id="edit"),
                tool("Bash", command="touch made.txt; echo > app.py", tool_id="touch"),
                tool("Bash", command="cat app.py; git log --oneline", tool_id="look"),
            ),
            reply(tool("continue_workflow", notes=NOTES)),
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )
    assert run_session(sid, harness.services(model)) == "workflow_complete"
    named = ["read", "write", "edit", "touch", "look"]  # the calls in order (the fake mints fresh ids)
    blocks = [b for b in model.requests[1].messages[-1].content if hasattr(b, "tool_use_id")]
    results = dict(zip(named, blocks, strict=True))
    assert results["write"].is_error and "read-only" in results["write"].content
    assert results["edit"].is_error and "read-only" in results["edit"].content
    assert "Read-only file system" in results["touch"].content
    assert "VALUE = 1" in results["look"].content and "initial" in results["look"].content
    assert (repo / "app.py").read_text() == "VALUE = 1\n" and not (repo / "made.txt").exists()
    assert git(repo, "status", "--porcelain") == "" and harness.record().delivery is None


def test_a_worktree_add_cut_short_is_made_again(repo: Path) -> None:
    """A start cut short leaves only its staging folder: made again; a session's folder
    (whatever the agent did to its `.git`) is always the session's, reused."""
    sid = "sess_01JD0000000000000000000001"
    half = staging_path(repo, sid)
    half.mkdir(parents=True)
    (half / "app.py").write_text("half checked out\n")  # never renamed into place
    tree, reused = make_worktree(repo, sid, f"worktrain/{sid}").path, False
    assert tree == worktree_path(repo, sid) and not reused and (tree / "app.py").read_text() == "VALUE = 1\n"
    assert not half.exists()
    assert (tree / ".git").is_dir() and not (tree / ".git" / "commondir").exists()  # a repository of its own
    assert make_worktree(repo, sid, f"worktrain/{sid}") == Made(tree, True, False)
