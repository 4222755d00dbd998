"""Issue 40 items 1, 3 and 6: the worker's own git runs nothing a session configured
(docs/security.md, "The worker's own git").

The attacker is the agent of a `none` session whose workspace is a git repository R: its
own Bash (planned by the fake model) writes R's `.git/config` so that git, run by the
worker outside the box, would run a payload. The payload writes a marker in a folder the
box cannot write: the marker appearing is code run outside the box. Each place the worker
runs git on R is tried: a worktree session placed on R later, the delivery of a worktree
session placed before the config was written, a parent's work fetched for its children,
`worktrain worktrees --prune`, a push. Each is tried twice: as the worker runs (the
allowlist refuses R, naming the keys) and with the allowlist switched off, so that the
runner's own configuration is shown to hold on its own (a session can swap the file
between the check and git's read).
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from daemon.bus.session.registry import NewSession
from daemon.fakemodel import ScriptedModel
from daemon.fakemodel.script import reply, tool
from daemon.host.runtimedir import runtime_path
from daemon.sandbox import report, roots
from daemon.sandbox.command import sandboxed
from daemon.schema.workspace import WorkspacePlan
from daemon.session import workplace as delivering
from daemon.session.gitbox import SandboxBox
from daemon.session.runner import run_session
from daemon.workspaces import repository
from daemon.workspaces.delivery import DeliverySettings, fetch_branch
from daemon.workspaces.git import GitError
from daemon.workspaces.push import push_branch
from daemon.workspaces.worktree import UnsafeRepository, main_repository
from tests.agent.conftest import NOTES, Harness, git, make_repo, make_worktree

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not report.current().available.landlock_abi, reason="no Landlock"),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where the payload writes: outside every grant of the box."""
    outside = tmp_path / "outside"
    outside.mkdir()
    return outside / "PWNED"


def poison(marker: Path, prefix: str = "$PWD/.worktrain/worktrees/") -> str:
    """The Bash the attacker runs in R: a payload, and the config that makes git run it for
    any URL under `prefix` (the child's repository), plus every other way in git knows."""
    return (
        f"printf '#!/bin/sh\\nid > {marker}\\n' > payload.sh && chmod +x payload.sh && "
        "git config protocol.ext.allow always && "
        f'git config "url.ext::sh -c $PWD/payload.sh% .insteadOf" "{prefix}" && '
        f'git config "url.ext::sh -c $PWD/payload.sh% .pushInsteadOf" "{prefix}" && '
        "git config core.fsmonitor $PWD/payload.sh && "
        "git config core.hooksPath $PWD/hooks && mkdir -p hooks && "
        "cp payload.sh hooks/reference-transaction && cp payload.sh hooks/post-checkout && "
        "git config credential.helper '!'$PWD/payload.sh && "
        "git config core.alternateRefsCommand $PWD/payload.sh && "
        "git config filter.evil.smudge $PWD/payload.sh && "
        "echo '* filter=evil' > .git/info/attributes && echo configured"
    )


def run_plain_attack(harness: Harness, repo: Path, command: str) -> str:
    """A `none` session on `repo` whose agent runs `command` in its Bash; the Bash's output."""
    harness.session_id = harness.registry.create(
        NewSession(workflowId="two-step", goal="Tidy up", workspacePath=str(repo), stepCount=2,
                   firstStepId="look")
    )  # fmt: skip
    model = ScriptedModel(
        [
            reply(tool("Bash", command=command)),
            reply(tool("continue_workflow", notes=NOTES)),
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )
    assert harness.run(model) == "workflow_complete"
    output = str(model.requests[1].messages[-1].content[0].content)  # type: ignore[union-attr]
    assert "configured" in output, output  # the attack really wrote R's config
    return output


@pytest.fixture
def no_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second lock alone: the config check passes whatever R's config says."""
    monkeypatch.setattr(repository.Repository, "check", lambda self: None)


def worktree_session(harness: Harness, repo: Path, **plan: Any) -> str:
    harness.session_id = harness.registry.create(
        NewSession(workflowId="two-step", goal="Raise VALUE", workspacePath=str(repo), stepCount=2,
                   firstStepId="look", workspace=WorkspacePlan(branchStrategy="worktree", **plan))
    )  # fmt: skip
    return harness.session_id


def finish(harness: Harness, model: ScriptedModel | None = None) -> str:
    model = model or ScriptedModel(
        [reply(tool("continue_workflow", notes=NOTES)), reply(tool("continue_workflow", notes=NOTES))]
    )
    services = harness.services(model)
    services.delivery = DeliverySettings(git_timeout_seconds=20.0)
    result: dict[str, str] = {}
    thread = threading.Thread(target=lambda: result.update(out=run_session(harness.session_id, services)))
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the session hung"
    return result["out"]


# ---- item 1 ----------------------------------------------------------------------------------------


def test_a_worktree_session_on_a_repository_a_plain_session_configured_is_refused_naming_the_keys(
    harness: Harness, repo: Path, marker: Path
) -> None:
    """Old code: the child's placement ran `git reset --hard` with R's filter and hooks as
    the worker, and its delivery `git fetch` through `ext::` (the marker appeared, uid 0)."""
    run_plain_attack(harness, repo, poison(marker))
    worktree_session(harness, repo)
    assert finish(harness) == "workspace_error"
    detail = harness.record().outcomeDetail or ""
    for key in (
        "protocol.ext.allow",
        "url.ext::sh",
        "core.fsmonitor",
        "credential.helper",
        "filter.evil.smudge",
    ):
        assert key in detail, detail
    assert not marker.exists(), marker.read_text()


def poisoned_meanwhile(repo: Path, marker: Path) -> ScriptedModel:
    """A worktree session's model: its agent writes a file; then, while it works, a `none`
    session on the same repository poisons R's config (run here as that session's Bash would)."""

    def meanwhile(_request: Any) -> Any:
        subprocess.run(["bash", "-c", poison(marker, f"{repo}/.worktrain/worktrees/")], cwd=repo, check=True)
        return reply(tool("continue_workflow", notes=NOTES))

    return ScriptedModel(
        [
            reply(tool("Bash", command="echo 'VALUE = 2' > app.py")),
            meanwhile,
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )


def test_the_delivery_of_a_session_placed_before_the_config_was_written_is_refused(
    harness: Harness, repo: Path, marker: Path
) -> None:
    sid = worktree_session(harness, repo)
    assert finish(harness, poisoned_meanwhile(repo, marker)) == "workflow_complete"
    delivery = harness.record().delivery
    assert delivery.state == "failed" and "protocol.ext.allow" in delivery.error, delivery
    tree = repo / ".worktrain" / "worktrees" / sid
    assert (tree / "app.py").read_text() == "VALUE = 2\n"  # nothing lost: the work stays
    assert not marker.exists(), marker.read_text()


@pytest.mark.usefixtures("no_allowlist")
def test_with_the_allowlist_off_the_runner_alone_runs_nothing_the_config_names(
    harness: Harness, repo: Path, marker: Path
) -> None:
    """A session may swap the config between the check and git's read: every worker-side
    git on R (placement, delivery's fetch, summary, removal) must hold by its own settings."""
    run_plain_attack(harness, repo, poison(marker))
    worktree_session(harness, repo)  # placed on a poisoned R: its checkout, in the box
    finish(harness, poisoned_meanwhile(repo, marker))
    assert not marker.exists(), marker.read_text()
    sid = worktree_session(harness, repo)
    finish(harness, poisoned_meanwhile(repo, marker))  # delivered from a poisoned R
    assert not marker.exists(), marker.read_text()
    delivery = harness.record().delivery
    assert delivery is not None and delivery.state in ("delivered", "failed"), delivery
    if delivery.state == "delivered":
        assert git(repo, "show", f"worktrain/{sid}:app.py") == "VALUE = 2"


@pytest.mark.usefixtures("no_allowlist")
def test_a_parents_work_fetched_for_its_children_runs_no_config(
    repo: Path, marker: Path, tmp_path: Path
) -> None:
    tree = make_worktree(repo, "sess_parent", "worktrain/sess_parent").path
    (tree / "app.py").write_text("VALUE = 2\n")
    subprocess.run(["bash", "-c", poison(marker, f"{repo}/.worktrain/worktrees/")], cwd=repo, check=True)
    box = SandboxBox((repo / ".git",))
    try:
        fetch_branch(box, main_repository(repo), tree, "worktrain/sess_parent", 20, replace=True)
    except GitError as exc:  # a refusal is fine: only the marker decides
        print("fetch refused:", exc)
    assert not marker.exists(), marker.read_text()


def test_prune_refuses_a_configured_repository_and_runs_nothing(repo: Path, marker: Path) -> None:
    make_worktree(repo, "sess_01JD0000000000000000000000", "worktrain/sess_01JD0000000000000000000000")
    subprocess.run(["bash", "-c", poison(marker, f"{repo}/.worktrain/worktrees/")], cwd=repo, check=True)
    with pytest.raises(UnsafeRepository, match=r"protocol\.ext\.allow"):
        delivering.salvage_and_remove(
            main_repository(repo), repo / ".worktrain/worktrees/sess_01JD0000000000000000000000", "s"
        )
    assert not marker.exists()


@pytest.mark.usefixtures("no_allowlist")
def test_prune_with_the_allowlist_off_runs_nothing(repo: Path, marker: Path) -> None:
    sid = "sess_01JD0000000000000000000000"
    tree = make_worktree(repo, sid, f"worktrain/{sid}").path
    subprocess.run(["bash", "-c", poison(marker, f"{repo}/.worktrain/worktrees/")], cwd=repo, check=True)
    try:
        delivering.salvage_and_remove(main_repository(repo), tree, sid)
    except GitError as exc:
        print("prune refused:", exc)
    assert not marker.exists(), marker.read_text()


@pytest.mark.usefixtures("no_allowlist")
def test_a_push_never_reads_the_repositorys_url_rewrites_or_credential_helpers(
    repo: Path, marker: Path, tmp_path: Path
) -> None:
    """Old code pushed from R with R's config: a `pushInsteadOf` sent the branch where the
    session chose, and a `credential.helper` ran as the worker."""
    bare, evil = tmp_path / "remote.git", tmp_path / "evil.git"
    for target in (bare, evil):
        subprocess.run(["git", "init", "-q", "--bare", str(target)], check=True)
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "branch", "feature")
    git(repo, "config", f"url.{evil}.pushInsteadOf", str(bare))
    git(repo, "config", "credential.helper", f"!{marker.parent}/../payload.sh")
    url = push_branch(main_repository(repo), "feature", "origin", None, 20)
    assert url == str(bare)
    assert git(bare, "rev-parse", "feature") == git(repo, "rev-parse", "feature")
    assert subprocess.run(["git", "-C", str(evil), "rev-parse", "--verify", "-q", "feature"]).returncode != 0
    assert not marker.exists()


def test_an_ordinary_repository_config_is_accepted(repo: Path, tmp_path: Path) -> None:
    git(repo, "remote", "add", "origin", "https://example.com/a/b.git")
    git(repo, "config", "branch.main.remote", "origin")
    git(repo, "config", "branch.main.merge", "refs/heads/main")
    git(repo, "config", "user.name", "Someone")
    git(repo, "config", "user.email", "someone@example.com")
    git(repo, "config", "core.autocrlf", "false")
    git(repo, "config", "extensions.worktreeConfig", "true")
    git(repo, "config", "--worktree", "user.name", "Me")
    assert main_repository(repo).top == repo.resolve()
    git(repo, "config", "--worktree", "core.sshCommand", "evil")
    with pytest.raises(UnsafeRepository, match=r"core\.sshcommand"):
        main_repository(repo)  # config.worktree is read too once the extension is on


def test_a_config_that_is_a_fifo_or_a_symlink_is_refused_without_hanging(repo: Path, tmp_path: Path) -> None:
    config = repo / ".git" / "config"
    real = tmp_path / "real-config"
    real.write_text(config.read_text())
    config.unlink()
    config.symlink_to(real)
    with pytest.raises(UnsafeRepository, match="plain config file"):
        main_repository(repo)
    config.unlink()
    subprocess.run(["mkfifo", str(config)], check=True)
    with pytest.raises(UnsafeRepository, match="plain config file"):
        main_repository(repo)


# ---- item 3: a branch that existed before the session only fast-forwards --------------------------


ORPHAN = (
    "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a && "
    'git reset -q --hard "$(git commit-tree -m orphan "$(git mktree </dev/null)")" && '
    "echo replaced > app.py && git add app.py && git commit -qm x && echo ok"
)


def agent_rewrites_history() -> ScriptedModel:
    return ScriptedModel(
        [
            reply(tool("Bash", command=ORPHAN)),
            reply(tool("continue_workflow", notes=NOTES)),
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )


def test_a_named_branch_that_existed_is_only_fast_forwarded(harness: Harness, repo: Path) -> None:
    """Old code: the `+` refspec replaced `release`'s history with the agent's orphan."""
    git(repo, "branch", "release")
    before = git(repo, "rev-parse", "release")
    worktree_session(harness, repo, branch="release")
    assert finish(harness, agent_rewrites_history()) == "workflow_complete"
    delivery = harness.record().delivery
    assert delivery.state == "failed" and "non-fast-forward" in (delivery.error or ""), delivery
    assert git(repo, "rev-parse", "release") == before
    assert harness.record().branchExisted is True


def test_a_branch_the_session_created_may_be_replaced(harness: Harness, repo: Path) -> None:
    worktree_session(harness, repo, branch="feature/new")
    assert finish(harness, agent_rewrites_history()) == "workflow_complete"
    delivery = harness.record().delivery
    assert delivery.state == "delivered", delivery
    assert git(repo, "show", "feature/new:app.py") == "replaced"
    assert harness.record().branchExisted is False


def test_a_fast_forward_of_an_existing_branch_is_delivered(harness: Harness, repo: Path) -> None:
    git(repo, "branch", "release")
    before = git(repo, "rev-parse", "release")
    worktree_session(harness, repo, branch="release")
    model = ScriptedModel(
        [
            reply(tool("Bash", command="echo 'VALUE = 3' > app.py")),
            reply(tool("continue_workflow", notes=NOTES)),
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )
    assert finish(harness, model) == "workflow_complete"
    assert harness.record().delivery.state == "delivered"
    assert git(repo, "merge-base", "--is-ancestor", before, "release") == ""  # exit 0: an ancestor


# ---- item 6: nothing environmental on a command line ---------------------------------------------


def test_the_upload_pack_line_carries_no_environment_and_no_plan(repo: Path, harness: Harness) -> None:
    """Old code: `env -i PATH=... HOME=... <launcher> @/tmp/...plan` on the line, so every
    delivery wrote the scrubbed environment and the plan's path into R's reflog."""
    sid = worktree_session(harness, repo)
    tree = make_worktree(repo, sid, f"worktrain/{sid}").path
    with SandboxBox((repo / ".git",)).upload_pack(tree) as (line, env):
        assert "env -i" not in line and "PATH=" not in line and "@/" not in line, line
        assert env["WORKTRAIN_SANDBOX_PLAN"] and env["PATH"]
    (tree / "app.py").write_text("VALUE = 2\n")
    assert finish(harness) == "workflow_complete"
    reflog = (repo / ".git" / "logs" / "refs" / "heads" / f"worktrain/{sid}").read_text()
    assert "worktrain: deliver" in reflog and "PATH" not in reflog and "upload-pack" not in reflog, reflog


# ---- the inventory: what WorkTrain runs from is no workspace ---------------------------------------


def test_no_workspace_may_hold_what_worktrain_runs_from(tmp_path: Path) -> None:
    """Old code: a workspace of `/tmp` was allowed, and its Bash could rewrite the plan file
    of another session's next command (`/tmp/worktrain-cmd-*.plan/plan`) before that
    command's launcher read it; a workspace holding WorkTrain's tree could edit the
    launcher itself."""
    data = Path("/var/lib/worktrain-test-data")  # a data dir outside /tmp: /tmp is refused for its own sake
    policy = roots.Roots(data)
    for name, path in roots.own_paths(data):
        for workspace in (path, path / "x", path.parent):
            assert policy.refusal(workspace) is not None, (name, workspace)
    assert "holds WorkTrain's runtime folder" in (policy.refusal(Path("/tmp")) or "")
    assert policy.refusal(tmp_path / "ws") is None
    with sandboxed("true", tmp_path, {}) as box:
        assert runtime_path() in box.tmpdir.parents  # plans and TMPDIRs live there, 0700
        assert stat.S_IMODE(os.stat(runtime_path()).st_mode) == 0o700


def test_a_session_whose_workspace_is_tmp_runs_no_tool(harness: Harness) -> None:
    harness.create(workspace=Path("/tmp"))
    model = ScriptedModel([reply(tool("Bash", command="echo ran"))])
    assert harness.run(model) == "workspace_not_allowed"
    assert model.requests == []
