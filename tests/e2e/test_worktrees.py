"""Worktree sessions with real processes (README's Coding sessions, issue 22): redis-server, `worktrain web`,
`worktrain worker`, the real SDK against the fake model's `coder` rule (Glob, Grep, Read,
Edit, Bash as the goal orders, daemon/fakemodel/coder.py), on git repositories made here.

- two sessions on one repository at once, each in its own worktree on its own branch, the
  main checkout's `git status` unchanged throughout;
- `delivery: push` to a bare clone, and a fake `gh` on PATH as WORKTRAIN_DELIVERY_COMMAND
  receiving the WT_* variables;
- a cancelled session's work committed on its branch, `partial`;
- kill -9 after the turn that read the file: the resumed attempt works in the same
  worktree (same inode), and its Edit of the file read before the crash is accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel.coder import coder_rule
from tests.crash.harness import WORKFLOW_ID, SessionModel, Stack, session_of, stacks, wait_until

pytestmark = pytest.mark.e2e

AUTHOR = "Delivery Bot <bot@example.com>"


class CoderModel(SessionModel):
    """The crash harness's fake API, answering with the coder rule."""

    def rule(self, request: ModelRequest) -> ModelReply:
        sid = session_of(request.system)
        with self._lock:
            self.calls[sid] += 1
        answer = coder_rule(request)
        assert isinstance(answer, ModelReply)
        return answer


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    yield from stacks(tmp_path, Stack)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_repo(where: Path) -> Path:
    repo = where / "project"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "config.py").write_text("LIMIT = 10\nNAME = 'demo'\n")
    (repo / "src" / "other.py").write_text("VALUE = 'one'\n")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "ignored.log").write_text("not tracked\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "initial")
    return repo


def dispatch(stack: Stack, repo: Path, goal: str, **fields: Any) -> str:
    body = {"workflowId": WORKFLOW_ID, "goal": goal, "workspacePath": str(repo), "branchStrategy": "worktree"}
    answer = stack.http("POST", "/api/v2/auto/dispatch", {**body, **fields})
    assert answer.status == 202, answer
    return str(answer.body["data"]["sessionId"])


def session(stack: Stack, sid: str) -> dict[str, Any]:
    answer = stack.http("GET", f"/api/v2/sessions/{sid}")
    assert answer.status == 200, answer
    return dict(answer.body["data"])


def tool_results(stack: Stack, sid: str) -> dict[str, dict[str, Any]]:
    """Every tool_result the fake model was sent for the session, by the name of the tool it
    answers (last wins; by name, as the fake mints fresh tool ids on every call)."""
    found: dict[str, dict[str, Any]] = {}
    for request in stack.model.requests_of(sid):
        names: dict[str, str] = {}
        for message in request["messages"]:
            if isinstance(message["content"], str):
                continue
            for block in message["content"]:
                if block.get("type") == "tool_use":
                    names[block["id"]] = block["name"]
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    if isinstance(content, list):
                        content = "".join(part.get("text", "") for part in content)
                    name = names.get(block["tool_use_id"], block["tool_use_id"])
                    found[name] = {"text": content, "error": bool(block.get("is_error"))}
    return found


def test_two_sessions_on_one_repo_push_and_the_delivery_command(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    git(repo, "remote", "add", "origin", str(bare))
    bin_dir, record_dir = tmp_path / "bin", tmp_path / "gh-calls"
    bin_dir.mkdir()
    record_dir.mkdir()
    fake_gh = bin_dir / "gh"
    fake_gh.write_text(
        "#!/bin/bash\n"
        f'out="{record_dir}/$WT_SESSION_ID.json"\n'
        'python3 - "$@" > "$out" <<\'EOF\'\n'
        "import json, os, sys\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('WT_')}\n"
        "body = open(env['WT_BODY_FILE']).read()\n"
        "print(json.dumps({'args': sys.argv[1:], 'env': env, 'body': body, 'cwd': os.getcwd()}))\n"
        "EOF\n"
    )
    fake_gh.chmod(0o755)
    extra = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORKTRAIN_DELIVERY_COMMAND": 'gh pr create --head "$WT_BRANCH" --base main --title "$WT_TITLE" '
        '--body-file "$WT_BODY_FILE"',
        "WORKTRAIN_GIT_AUTHOR": AUTHOR,
    }
    stack = make_stack(model=CoderModel(), concurrency=2, extra_env=extra).start()
    status_before = git(repo, "status", "--porcelain", "--untracked-files=all")
    # each session sleeps in Bash after its edit, so both are at work in their worktrees at once
    first = dispatch(
        stack,
        repo,
        "Raise the limit\nedit src/config.py: LIMIT = 10 => LIMIT = 20\nbash: sleep 2",
        delivery="push",
    )
    second = dispatch(
        stack, repo, "Rename the value\nedit src/other.py: 'one' => 'two'\nbash: sleep 2", delivery="push"
    )
    trees = [repo / ".worktrain" / "worktrees" / sid for sid in (first, second)]
    wait_until(lambda: all(t.is_dir() for t in trees), "both worktrees to exist at once", timeout=60)
    assert (
        git(repo, "status", "--porcelain", "--untracked-files=all") == status_before
    )  # .worktrain is excluded
    for sid in (first, second):
        stack.wait_finished(sid)
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == status_before
    assert (repo / "src" / "config.py").read_text().startswith("LIMIT = 10")  # the main checkout: untouched

    for sid, path, expected in (
        (first, "src/config.py", "LIMIT = 20"),
        (second, "src/other.py", "VALUE = 'two'"),
    ):
        data = session(stack, sid)
        assert data["status"] == "completed", (data, stack.logs())
        delivery = data["delivery"]
        branch = f"worktrain/{sid}"
        assert (delivery["state"], delivery["branch"], delivery["pushed"], delivery["remote"]) == (
            "delivered", branch, True, "origin",
        ), (sid, delivery["error"], stack.logs()[-6000:])  # fmt: skip
        assert delivery["commits"] == 1 and path in delivery["diffStat"] and delivery["worktree"] is None
        assert expected in git(bare, "show", f"{branch}:{path}")  # pushed to the bare remote
        assert git(bare, "rev-parse", branch) == delivery["headCommit"]
        assert git(repo, "log", "-1", "--format=%an <%ae>", branch) == AUTHOR
        called = json.loads((record_dir / f"{sid}.json").read_text())
        env = called["env"]
        assert (env["WT_SESSION_ID"], env["WT_BRANCH"], env["WT_BASE_REF"]) == (sid, branch, "HEAD")
        assert env["WT_REPO"] == str(repo) and called["cwd"] == str(repo)
        assert called["args"][:4] == ["pr", "create", "--head", branch]
        assert env["WT_TITLE"] in ("Raise the limit", "Rename the value")
        assert "Coder notes" in called["body"] and f"WorkTrain-Session: {sid}" in called["body"]
        assert stack.events_of(sid, "session_delivered")[0]["state"] == "delivered"
        assert not (repo / ".worktrain" / "worktrees" / sid).exists()  # removed; the branch stays
    # the other session's change never reached this branch
    assert "LIMIT = 10" in git(repo, "show", f"worktrain/{second}:src/config.py")


def test_a_cancelled_session_is_delivered_partial(make_stack: Callable[..., Stack], tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    stack = make_stack(model=CoderModel()).start()
    sid = dispatch(
        stack, repo, "Raise the limit\nedit src/config.py: LIMIT = 10 => LIMIT = 30\nbash: sleep 3"
    )
    tree = repo / ".worktrain" / "worktrees" / sid
    edited = tree / "src" / "config.py"
    wait_until(lambda: edited.exists() and "LIMIT = 30" in edited.read_text(), "the edit", timeout=60)
    assert stack.http("POST", f"/api/v2/sessions/{sid}/cancel").status == 202
    stack.wait_finished(sid)
    data = session(stack, sid)
    assert data["status"] == "cancelled" and data["delivery"]["state"] == "partial", data
    assert "LIMIT = 30" in git(repo, "show", f"worktrain/{sid}:src/config.py")
    assert git(repo, "log", "-1", "--format=%s", f"worktrain/{sid}") == "[partial] Raise the limit"
    assert git(repo, "status", "--porcelain") == ""


def test_kill_9_mid_session_resumes_in_the_same_worktree(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    stack = make_stack(model=CoderModel(), faults=True).start()
    goal = "Raise the limit\nedit src/config.py: LIMIT = 10 => LIMIT = 40\nbash: stat -c 'inode %i' ."
    # attempt 1 dies right after turn 1's checkpoint: the file was read (Glob, Grep, Read), not edited
    sid = dispatch(
        stack, repo, goal, context={"worktrainFault": {"point": "after_checkpoint", "occurrence": 1}}
    )
    tree = repo / ".worktrain" / "worktrees" / sid
    inode = wait_until(lambda: tree.is_dir() and tree.stat().st_ino, "the worktree", timeout=60)
    stack.wait_finished(sid, timeout=120)
    data = session(stack, sid)
    assert data["status"] == "completed" and data["attempt"] == 2, (data, stack.logs())
    assert stack.events_of(sid, "session_resumed")
    results = tool_results(stack, sid)
    assert "src/config.py" in results["Glob"]["text"]
    assert "ignored.log" not in results["Glob"]["text"]  # .gitignore honoured
    assert results["Grep"]["text"] == "src/config.py"
    edit = results["Edit"]
    assert not edit["error"] and "replaced 1 occurrence" in edit["text"], edit  # the ledger survived
    assert f"inode {inode}" in results["Bash"]["text"]  # the same worktree
    assert data["delivery"]["state"] == "delivered"
    assert "LIMIT = 40" in git(repo, "show", f"worktrain/{sid}:src/config.py")
