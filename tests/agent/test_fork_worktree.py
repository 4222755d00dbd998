"""Worktree forks in one process (README's "Fork a session"): the runner and a scripted model on a
real git repository; each turn's end snapshotted in the box (a hidden ref of the session's
own repository, never its branch), the snapshots delivered into the main repository, and a
fork's repository made from one — its worktree, index and HEAD as they were at that turn's
end — on a branch of its own. The source's branch and record never change.

With real processes (a fork of a running session, kill -9) see tests/e2e/test_forks_e2e.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.bus.session.registry import NewSession
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.forking.fork import ForkRefused, ForkRequest
from daemon.schema.turnmarks import TurnMarks
from daemon.schema.workspace import WorkspacePlan
from daemon.session.runner import run_session
from daemon.workspaces.delivery import DeliverySettings
from daemon.workspaces.snapshots import KEEP_EVERY, KEEP_LAST, dropped_turn
from tests.agent.conftest import NOTES, Harness, git, make_repo
from tests.agent.test_fork import forker

pytestmark = pytest.mark.processes


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"app.py": "VALUE = 1\n", ".gitignore": "*.log\n"})


def create(harness: Harness, repo: Path) -> str:
    harness.session_id = harness.registry.create(
        NewSession(
            workflowId="two-step",
            goal="Take notes",
            workspacePath=str(repo),
            stepCount=2,
            firstStepId="look",
            workspace=WorkspacePlan(branchStrategy="worktree"),
        )
    )
    return harness.session_id


def run(harness: Harness, model: ScriptedModel, worker: str = "w1") -> str:
    services = harness.services(model, worker_id=worker)
    services.delivery = DeliverySettings(author="Test Bot <bot@example.com>")
    return run_session(harness.session_id, services)


def bash(command: str) -> Any:
    return reply(tool("Bash", command=command))


SIX_TURNS = [
    bash("echo 'VALUE = 2' > app.py && git add app.py"),  # 1: staged
    bash("echo draft > scratch.txt && echo log > build.log"),  # 2: untracked, and an ignored file
    bash("echo 'the notes' > notes.txt"),  # 3: writes the file
    bash("rm notes.txt scratch.txt"),  # 4: deletes it
    reply(tool("continue_workflow", notes=NOTES)),  # 5
    reply(tool("continue_workflow", notes=NOTES)),  # 6: done
]


def test_a_fork_from_turn_3_has_the_worktree_of_turn_3_on_a_branch_of_its_own(
    harness: Harness, repo: Path
) -> None:
    source = create(harness, repo)
    assert run(harness, ScriptedModel(SIX_TURNS)) == "workflow_complete"
    marks = TurnMarks.parse(harness.bus.client.hgetall(harness.bus.keys.turns_of(source)))
    assert sorted(marks.ends) == [1, 2, 3, 4, 5, 6] and sorted(marks.snapshots) == [1, 2, 3, 4, 5, 6]
    # the snapshots: hidden refs of its own repository, delivered into the main one under its id
    delivered = git(repo, "for-each-ref", "--format=%(refname)", f"refs/worktrain/snapshots/{source}/")
    assert delivered.split() == [f"refs/worktrain/snapshots/{source}/{n}" for n in (1, 2, 3, 4, 5, 6)]
    source_branch = git(repo, "rev-parse", f"worktrain/{source}")
    source_record = harness.record().model_dump()
    assert source_record["delivery"]["snapshots"] is True and source_record["delivery"]["worktree"] is None
    assert git(repo, "show", f"worktrain/{source}:app.py") == "VALUE = 2"
    assert "notes.txt" not in git(repo, "ls-tree", "--name-only", f"worktrain/{source}")

    forked = forker(harness).fork(ForkRequest(source=source, turn=3, steer="Keep the notes this time."))
    assert forked.conversation_only is False and forked.fork_of.snapshot is not None
    assert forked.fork_of.snapshot.commit == marks.snapshots[3].commit
    harness.session_id = forked.session_id
    seen: dict[str, str] = {}

    def look(request: Any) -> Any:  # the fork's turn 4 looks at its worktree before it finishes
        return reply(tool("Bash", command="cat notes.txt; git status --short; git branch --show-current"))

    fork_model = ScriptedModel([look, reply(tool("continue_workflow", notes=NOTES)),
                                reply(tool("continue_workflow", notes=NOTES))])  # fmt: skip
    assert run(harness, fork_model, worker="w2") == "workflow_complete"
    said = fork_model.requests[1].messages[-1].content[0]
    seen["bash"] = str(getattr(said, "content", ""))
    print("the fork's turn 4 saw:", seen["bash"])
    assert "the notes" in seen["bash"]  # turn 3's file, deleted by the source's turn 4
    assert (
        "M  app.py" in seen["bash"] and "?? scratch.txt" in seen["bash"]
    )  # index and untracked, as they were
    assert "build.log" not in seen["bash"] and f"worktrain/{forked.session_id}" in seen["bash"]
    assert len(fork_model.requests) == 3 and fork_model.requests[0].messages[-1].texts == [
        "Keep the notes this time."
    ]
    # delivered onto its own branch; the source's branch and record unchanged
    assert git(repo, "show", f"worktrain/{forked.session_id}:notes.txt") == "the notes"
    assert git(repo, "rev-parse", f"worktrain/{source}") == source_branch
    after = harness.registry.get(source)
    assert after is not None and after.model_dump() == source_record
    assert git(repo, "rev-parse", f"refs/worktrain/forks/{forked.session_id}") == marks.snapshots[3].commit


def test_a_fork_of_a_removed_repository_whose_snapshots_were_not_delivered_fails_clearly(
    harness: Harness, repo: Path
) -> None:
    source = create(harness, repo)
    assert run(harness, ScriptedModel(SIX_TURNS)) == "workflow_complete"
    # as a repository removed by an older WorkTrain (before snapshots were delivered): the refs gone
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/worktrain/").split():
        git(repo, "update-ref", "-d", ref)
    git(repo, "-c", "gc.reflogExpire=now", "-c", "gc.pruneExpire=now", "gc", "-q", "--prune=now")
    forked = forker(harness).fork(ForkRequest(source=source, turn=3, steer="again"))
    harness.session_id = forked.session_id
    assert run(harness, ScriptedModel([])) == "workspace_error"
    record = harness.record()
    print(record.outcomeDetail)
    assert "is gone: its repository was removed and its snapshots were not delivered" in record.outcomeDetail


def test_a_removed_repository_whose_snapshots_were_not_delivered_is_a_409(
    harness: Harness, repo: Path
) -> None:
    source = create(harness, repo)
    assert run(harness, ScriptedModel(SIX_TURNS)) == "workflow_complete"
    record = harness.record()
    undelivered = record.delivery.model_copy(update={"snapshots": False})  # their fetch failed
    harness.bus.client.hset(
        harness.bus.keys.session(source).record, "delivery", undelivered.model_dump_json()
    )
    with pytest.raises(ForkRefused) as refused:
        forker(harness).fork(ForkRequest(source=source, turn=3, steer="again"))
    print(refused.value.message)
    assert (refused.value.status, refused.value.code) == (409, "snapshot_gone")
    assert "removed at its delivery" in refused.value.message


def test_the_keep_policy_bounds_what_a_long_session_keeps() -> None:
    kept = set(range(1, 201))
    for turn in range(1, 201):
        if (gone := dropped_turn(turn)) is not None:
            kept.discard(gone)
    assert kept == {n for n in range(1, 201) if n > 200 - KEEP_LAST or n % KEEP_EVERY == 0}
    assert len(kept) == KEEP_LAST + (200 - KEEP_LAST) // KEEP_EVERY == 38


def test_a_pruned_snapshot_is_a_409(harness: Harness, repo: Path) -> None:
    source = create(harness, repo)
    assert run(harness, ScriptedModel(SIX_TURNS)) == "workflow_complete"
    harness.bus.client.hdel(harness.bus.keys.turns_of(source), "snap:2")  # as the keep policy does
    with pytest.raises(ForkRefused) as refused:
        forker(harness).fork(ForkRequest(source=source, turn=2, steer="x"))
    assert (refused.value.status, refused.value.code) == (409, "snapshot_gone")
