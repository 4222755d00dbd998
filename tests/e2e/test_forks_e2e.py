"""Forks with real processes (README's "Fork a session", SPEC 3.12): redis-server, `worktrain web`,
`worktrain worker`, the real SDK against the fake model (with extended thinking on, so the API's
own check that a continued turn's thinking blocks come back verbatim is made on every call),
on git repositories made here. Judged by what the fake model received and by git.

The source: six turns of a worktree session — turn 3 writes notes.txt, turn 4 deletes it.
- a fork from turn 3 (the source ended and delivered, its repository removed): the fork's
  worktree has notes.txt; its first request carries exactly turns 1-3 of the source's
  history (thinking blocks and tool ids verbatim) and then the steer; the model is asked
  once for the fork's turn 4 and never for turns 1-3; the source's record and branch do not
  change; the time from the request to the fork's first model call is printed;
- a fork of a running session while it runs (its snapshot fetched from its repository), a
  fork of that fork on another model;
- kill -9 of the worker while the fork's worktree is being made: one fork, whole.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel import reply, text, tool
from tests.crash.harness import NOTES, WORKFLOW_ID, SessionModel, Stack, session_of, stacks, wait_until

pytestmark = pytest.mark.e2e

STEER = "Keep notes.txt this time: show it, then carry on."
THINKING = {"maxOutputTokens": 2048, "thinkingBudgetTokens": 1024}


def bash(command: str, *more: Any) -> ModelReply:
    return reply(text(f"Running {command!r}."), tool("Bash", command=command), *more)


def carry_on() -> Any:
    return tool("continue_workflow", notes=NOTES)


# the source: crash-four's four steps over six turns (it moves on at turns 2, 4, 5 and 6)
SOURCE = {
    1: bash("echo one > one.txt"),
    2: bash("git add one.txt", carry_on()),
    3: bash("printf 'the notes\\n' > notes.txt"),
    4: bash("rm notes.txt", carry_on()),
    5: bash("ls", carry_on()),
    6: reply(carry_on()),
}
# a fork from turn 3: its turn 4 looks at its worktree; it finishes the workflow as the source did
FORK = {
    4: bash("cat notes.txt; git status --short; git branch --show-current", carry_on()),
    5: reply(carry_on()),
}
FORK_OF_FORK = {5: bash("cat notes.txt", carry_on()), 6: reply(carry_on())}


class TurnModel(SessionModel):
    """Answers by session and turn (the turn: the request's assistant messages + 1)."""

    def __init__(self) -> None:
        super().__init__(latency=0.02)
        self.scripts: dict[str, dict[int, ModelReply]] = {}

    def answer(self, request: ModelRequest) -> ModelReply:
        turn = sum(1 for m in request.messages if m.role == "assistant") + 1
        return self.scripts.get(session_of(request.system), SOURCE).get(turn, reply(carry_on()))


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    yield from stacks(tmp_path, Stack)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def make_repo(where: Path) -> Path:
    repo = where / "project"
    repo.mkdir(parents=True)
    (repo / "README.md").write_text("# Forks\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "initial")
    return repo


def dispatch(stack: Stack, repo: Path, **extra: Any) -> str:
    body = {"workflowId": WORKFLOW_ID, "goal": "Take notes", "workspacePath": str(repo),
            "branchStrategy": "worktree", "agentConfig": THINKING, **extra}  # fmt: skip
    answer = stack.http("POST", "/api/v2/auto/dispatch", body)
    assert answer.status == 202, answer
    return str(answer.body["data"]["sessionId"])


def fork(stack: Stack, sid: str, turn: int, **body: Any) -> dict[str, Any]:
    answer = stack.http("POST", f"/api/v2/sessions/{sid}/fork", {"turn": turn, **body},
                        headers={"Idempotency-Key": f"e2e-{sid}-{turn}-{len(body)}"})  # fmt: skip
    assert answer.status == 202, answer
    return dict(answer.body["data"])


def session(stack: Stack, sid: str) -> dict[str, Any]:
    answer = stack.http("GET", f"/api/v2/sessions/{sid}")
    assert answer.status == 200, answer
    return dict(answer.body["data"])


def plain(value: Any) -> Any:
    """A recorded request's JSON without what the SDK adds per request (cache_control marks)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def asked_for(stack: Stack, sid: str, turn: int) -> list[dict[str, Any]]:
    """The requests the fake model received for `sid`'s turn `turn`."""
    return [
        r
        for r in stack.model.requests_of(sid)
        if sum(m["role"] == "assistant" for m in r["messages"]) == turn - 1
    ]


def tool_output(request: dict[str, Any]) -> str:
    last = request["messages"][-1]["content"]
    return "".join(str(b.get("content")) for b in last if b.get("type") == "tool_result")


def carries_the_turns_then_the_steer(
    source_next: dict[str, Any], fork_first: dict[str, Any], steer: str
) -> None:
    """The fork's first request is the source's next one, but for its own steer at the end."""
    theirs, ours = plain(source_next["messages"]), plain(fork_first["messages"])
    assert ours[:-1] == theirs[:-1]  # every earlier message verbatim: thinking, signatures, tool ids
    assert ours[-1]["content"][:-1] == [b for b in theirs[-1]["content"] if b["type"] == "tool_result"]
    # the turn's step text (when it moved on), then the steer: one delivery (the source had no steer there)
    own_steps = [b["text"] for b in theirs[-1]["content"] if b["type"] == "text"]
    assert ours[-1]["content"][-1] == {"type": "text", "text": "\n\n".join([*own_steps, steer])}
    thinking = [b for m in ours for b in m["content"] if isinstance(b, dict) and "thinking" in b["type"]]
    assert len(thinking) == 2 * sum(
        m["role"] == "assistant" for m in ours
    )  # a thinking + a redacted one each


def test_a_fork_from_turn_3_has_its_file_its_history_and_asks_once(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    model = TurnModel()
    stack = make_stack(model=model).start()
    repo = make_repo(tmp_path)
    source = dispatch(stack, repo)
    stack.wait_finished(source, timeout=120)
    before, branch = session(stack, source), git(repo, "rev-parse", f"worktrain/{source}")
    assert before["status"] == "completed" and before["turnCount"] == 6, stack.logs()[-4000:]
    assert "notes.txt" not in git(repo, "ls-tree", "--name-only", f"worktrain/{source}")
    assert not (repo / ".worktrain" / "worktrees" / source).exists()  # delivered, removed

    asked_at = time.time()
    forked = fork(stack, source, 3, steer=STEER)
    fork_id = forked["sessionId"]
    model.scripts[fork_id] = FORK
    assert forked["forkOf"]["turn"] == 3 and forked["conversationOnly"] is False
    stack.wait_finished(fork_id, timeout=120)
    data = session(stack, fork_id)
    assert data["status"] == "completed", (data, stack.logs()[-4000:])
    sent = stack.model.requests_of(fork_id)
    print(f"a fork's first model call {sent[0]['_at'] - asked_at:.3f}s after its request; {len(sent)} calls")
    assert [len(asked_for(stack, fork_id, turn)) for turn in (1, 2, 3, 4, 5)] == [0, 0, 0, 1, 1]
    carries_the_turns_then_the_steer(asked_for(stack, source, 4)[0], sent[0], STEER)
    seen = tool_output(asked_for(stack, fork_id, 5)[0])
    print("the fork's turn 4 saw:", seen)
    assert "the notes" in seen and "A  one.txt" in seen and f"worktrain/{fork_id}" in seen
    assert git(repo, "show", f"worktrain/{fork_id}:notes.txt") == "the notes"  # delivered on its own branch
    after = session(stack, source)
    assert [f["sessionId"] for f in after.pop("forks")] == [fork_id]
    before.pop("forks")
    assert after == before and git(repo, "rev-parse", f"worktrain/{source}") == branch


def test_a_fork_of_a_running_session_and_a_fork_of_that_fork_on_another_model(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    model = TurnModel()
    stack = make_stack(model=model).start(workers=2)
    repo = make_repo(tmp_path)
    source = dispatch(stack, repo)
    model.hold_when = lambda sid, n: sid == source and n == 5  # the source waits in its turn 5
    wait_until(lambda: model.held(source), "the source's turn 5", timeout=90)
    first = fork(stack, source, 3, steer=STEER)["sessionId"]
    model.scripts[first] = FORK
    stack.wait_finished(first, timeout=120)
    assert session(stack, source)["status"] == "running"  # it ran meanwhile, and still does
    second = fork(
        stack, first, 4, steer="Once more, on the other model.", agentConfig={"model": "claude-other"}
    )
    model.scripts[second["sessionId"]] = FORK_OF_FORK
    assert second["forkOf"]["sessionId"] == first and second["forkOf"]["snapshot"]["sessionId"] == first
    stack.wait_finished(second["sessionId"], timeout=120)
    model.release(source)
    stack.wait_finished(source, timeout=120)
    for sid in (source, first, second["sessionId"]):
        assert session(stack, sid)["status"] == "completed", (sid, stack.logs()[-4000:])
    other = stack.model.requests_of(second["sessionId"])
    assert {r["model"] for r in other} == {"claude-other"} and len(other) == 2
    carries_the_turns_then_the_steer(
        asked_for(stack, first, 5)[0], other[0], "Once more, on the other model."
    )
    assert "the notes" in tool_output(other[1])  # the first fork's turn 4 kept it; so does its fork
    assert "notes.txt" not in git(repo, "ls-tree", "--name-only", f"worktrain/{source}")
    assert git(repo, "show", f"worktrain/{first}:notes.txt") == "the notes"


def test_kill_9_while_the_forks_worktree_is_made_leaves_one_whole_fork(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    model = TurnModel()
    stack = make_stack(model=model, faults=True).start()
    repo = make_repo(tmp_path)
    # the source passes no fork point; its forks inherit its context and are armed (attempt 1)
    source = dispatch(stack, repo, context={"worktrainFault": {"point": "fork_pinned", "occurrence": 1}})
    stack.wait_finished(source, timeout=120)
    forked = fork(stack, source, 3, steer=STEER)
    fork_id = forked["sessionId"]
    model.scripts[fork_id] = FORK
    record = stack.wait_finished(fork_id, timeout=180)
    print("the fork after kill -9:", {k: record.get(k) for k in ("status", "outcome", "attempt")})
    assert record["status"] == "completed" and record["attempt"] == "2", stack.logs()[-4000:]
    assert stack.events_of(fork_id, "session_resumed")
    assert [len(asked_for(stack, fork_id, turn)) for turn in (1, 2, 3, 4)] == [0, 0, 0, 1]
    carries_the_turns_then_the_steer(
        asked_for(stack, source, 4)[0], stack.model.requests_of(fork_id)[0], STEER
    )
    assert "the notes" in tool_output(asked_for(stack, fork_id, 5)[0])
    assert [f["sessionId"] for f in session(stack, source)["forks"]] == [fork_id]  # one fork
    steers = stack.http("GET", f"/api/v2/sessions/{fork_id}/steers").body["data"]["steers"]
    assert [(s["offset"], s["state"], s["deliveredTurnId"]) for s in steers] == [(1, "delivered", 4)]
