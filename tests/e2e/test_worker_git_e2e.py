"""Issue 40 item 1 end to end: a `none` session poisons its repository's config, then spawns a
worktree child (real `worktrain web` and `worker` processes, the fake model driving the
agent's own Bash and spawn_agent). Old code: at the child's placement and delivery the
worker ran git in the repository with that config, and the payload ran as the worker, uid 0,
outside the box. Now the repository is refused with its keys named — at the child's
placement, at a later dispatch (400), and by `worktrain worktrees --prune` — and the marker
the payload would write never appears.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel.coord import coordination_rule
from tests.agent.conftest import make_worktree
from tests.agent.test_worker_git import poison
from tests.crash.harness import ROOT, WORKTRAIN, SessionModel, Stack, stacks

pytestmark = pytest.mark.e2e

ONE_STEP = {
    "id": "one-step",
    "name": "One step",
    "description": "One step: do the goal and report.",
    "version": "1.0.0",
    "steps": [{"id": "do", "title": "Do it", "prompt": "Do what the goal says, then report."}],
}
LEFTOVER = "sess_01JD0000000000000000000000"
KEYS = ("protocol.ext.allow", "url.ext::sh", "core.fsmonitor", "credential.helper")


class CoordModel(SessionModel):
    def answer(self, request: ModelRequest) -> ModelReply:
        return coordination_rule(request)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    factory = stacks(tmp_path_factory.mktemp("workergit"), Stack)
    stack = next(factory)(model=CoordModel(latency=0.01), lease_seconds=2.0, concurrency=4)
    (stack.tmp / "workflows" / "one-step.json").write_text(json.dumps(ONE_STEP))
    repo = stack.workspace
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "initial")
    make_worktree(repo, LEFTOVER, f"worktrain/{LEFTOVER}")  # a session repository left behind
    stack.start(workers=1, processes=1)
    try:
        yield stack
    finally:
        next(factory, None)


def goal(**wants: Any) -> str:
    return "fake:" + json.dumps(wants)


def test_a_plain_session_that_poisons_its_repository_gets_no_code_run_by_the_worker(stack: Stack) -> None:
    marker = stack.tmp / "outside" / "PWNED"
    marker.parent.mkdir()
    child = {"workflowId": "one-step", "goal": goal(notes="child"), "branchStrategy": "worktree"}
    body = {
        "workflowId": "one-step",
        "goal": goal(bash=poison(marker), spawn=[child], single=True),
        "workspacePath": str(stack.workspace),
    }
    answer = stack.http("POST", "/api/v2/auto/dispatch", body)
    assert answer.status == 202, answer
    parent = answer.body["data"]["sessionId"]
    stack.wait_finished(parent, 90)
    assert "configured" in json.dumps(stack.model.requests_of(parent)[1])  # the config was written
    kids = [c["sessionId"] for c in stack.http("GET", f"/api/v2/sessions/{parent}").body["data"]["children"]]
    assert len(kids) == 1, stack.logs()
    record = stack.wait_finished(kids[0], 60)
    assert (record["status"], record["outcome"]) == ("failed", "workspace_error"), record
    assert all(key in record["outcomeDetail"] for key in KEYS), record["outcomeDetail"]
    assert not marker.exists(), marker.read_text()

    # a later worktree dispatch on the same repository: 400, the keys named
    later = {**body, "goal": goal(notes="later"), "branchStrategy": "worktree"}
    refused = stack.http("POST", "/api/v2/auto/dispatch", later)
    assert (refused.status, refused.body["code"]) == (400, "repository_config_refused"), refused
    assert "protocol.ext.allow" in refused.body["error"]

    # `worktrain worktrees --prune` on it: refused, the keys named, the leftover kept
    prune = subprocess.run(
        [*WORKTRAIN, "worktrees", str(stack.workspace), "--prune"],
        cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert prune.returncode != 0 and "protocol.ext.allow" in prune.stderr, (prune.stdout, prune.stderr)
    assert (stack.workspace / ".worktrain" / "worktrees" / LEFTOVER).is_dir()
    assert not marker.exists(), marker.read_text()
