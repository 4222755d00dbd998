"""README's Sub-agents and questions `branchStrategy: worktree` for children (issue 29 item 12), on the
new mechanism:
the parent's work so far committed in the box and fetched into the main repository; each
child dispatched on the main repository with a repository of its own from the parent's
branch head, delivered onto its own branch there."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.bus.session.dispatch import Dispatched
from daemon.sandbox import gitgrants, report
from daemon.session.subagents import Parent, Subagents
from daemon.tools.coordination import AgentSpec
from tests.agent.conftest import CATALOG, make_worktree

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not report.current().available.landlock_abi, reason="no Landlock"),
]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


class Dispatcher:
    def __init__(self) -> None:
        self.sessions: list[Any] = []

    def dispatch(self, new: Any, _limits: Any, _key: Any = None) -> Dispatched:
        self.sessions.append(new)
        return Dispatched(f"sess_child{len(self.sessions)}", "queued")


def test_a_worktree_child_branches_from_the_parents_work_so_far(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("VALUE = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "initial")
    tree = make_worktree(repo, "sess_parent", "worktrain/sess_parent").path
    (tree / "app.py").write_text("VALUE = 2\n")  # the parent's work, not committed yet
    grants = tuple(str(p) for p in gitgrants.grants_for(tree))
    parent = Parent(
        "sess_parent", "sess_parent", 0, str(tree),
        repo=str(repo), branch="worktrain/sess_parent", tree=str(tree), grants=grants,
    )  # fmt: skip
    dispatcher = Dispatcher()
    fleet = SimpleNamespace(dispatcher=dispatcher, catalog=CATALOG)
    channel = SimpleNamespace(guard=lambda: None)
    registry = SimpleNamespace(get=lambda _sid: None)  # the parent has no record: no callbackUrl
    subagents = Subagents(fleet, None, registry, channel, parent, None, None)  # type: ignore[arg-type]
    base = subagents._commit_work_so_far()
    spec = AgentSpec(workflowId="two-step", goal="Raise it again", branchStrategy="worktree")
    subagents._dispatch("toolu_a", 0, spec, base)
    assert git(repo, "show", "worktrain/sess_parent:app.py") == "VALUE = 2"  # fetched, in the box
    assert git(repo, "show", "main:app.py") == "VALUE = 1" and (repo / "app.py").read_text() == "VALUE = 1\n"
    child = dispatcher.sessions[0]
    assert child.workspacePath == str(repo)
    assert child.workspace.branchStrategy == "worktree"
    assert child.workspace.baseRef == "refs/heads/worktrain/sess_parent"
    child_tree = make_worktree(repo, "sess_child1", "worktrain/sess_child1", child.workspace.baseRef).path
    assert (child_tree / "app.py").read_text() == "VALUE = 2\n"  # the parent's work so far
    assert (child_tree / ".git").is_dir()  # a repository of its own
