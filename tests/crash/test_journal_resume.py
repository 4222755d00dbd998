"""docs/durability.md with real processes and the fake minting fresh ids: a resumed attempt continues
from the journal, not from the model's memory.

- kill -9 while a turn's `Bash sleep` runs after a finished `Write`: the model is asked once
  for that turn; the next request answers both tool ids of the reply it received (the
  Write's real result, the Bash's "effects unknown"); the Write and the Bash ran once;
- a crash at each of the loop's points (the new ones: after the reply is journaled, before
  its first tool; between a tool's end and its journal entry; and the old ones) with steers
  arriving all along: no turn asked twice, no Bash run twice, no tool id unanswered, every
  steer delivered once;
- SIGSTOP of the worker past its lease while the Bash runs, another worker takes over, then
  the frozen one thaws: the same, and the thawed worker writes nothing.
Each prints its figures (model calls, tool runs) for docs/durability.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.journal import EFFECTS_UNKNOWN
from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel import reply, text, tool
from tests.crash.coordinator import Coordinator, verify
from tests.crash.harness import NOTES, SessionModel, Stack, alive, pid_of_worker, wait_until
from tests.crash.test_worker_death import attempt_of

pytestmark = pytest.mark.e2e

LEASE = 2.0
RUNS = "bash_runs.txt"  # each Bash call appends its turn: a line twice is a Bash run twice
WRITTEN = "made.txt"


class JournalModel(SessionModel):
    """Turn 1 writes a file, then runs a Bash command (`sleep_argv` long, when given); every
    later turn reads, runs a short Bash and continues the workflow. Each Bash appends its
    turn to bash_runs.txt."""

    def __init__(self, sleep_argv: tuple[str, str] | None = None) -> None:
        super().__init__(latency=0.0)
        self.sleep_argv = sleep_argv

    def answer(self, request: ModelRequest) -> ModelReply:
        turn = sum(1 for m in request.messages if m.role == "assistant") + 1
        record = f"echo turn{turn} >> {RUNS}"
        if turn == 1 and self.sleep_argv is not None:
            return reply(
                text("Writing, then a long check."),
                tool("Write", path=WRITTEN, content="made once\n"),
                tool("Bash", command=f"{record}; {' '.join(self.sleep_argv)}"),
            )
        return reply(
            text(f"Turn {turn}."),
            tool("Read", path="README.md"),
            tool("Bash", command=f"{record}; sleep 0.05"),
            tool("continue_workflow", notes=NOTES),
        )


def messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if isinstance(m["content"], list)]


def assistant_count(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "assistant")


def unanswered(stack: Stack, sid: str) -> list[str]:
    """Tool ids the fake minted for this session that no later request answers (but the last
    reply's: the session completed with it, no request follows)."""
    answered = {
        block["tool_use_id"]
        for request in stack.model.requests_of(sid)
        for m in messages(request)
        for block in m["content"]
        if block.get("type") == "tool_result"
    }
    sent = [reply for body, reply in stack.model.server.replies if sid in str(body.get("system"))]
    minted = [
        block.id for reply in sent[:-1] for block in reply.content if getattr(block, "type", "") == "tool_use"
    ]
    return [tool_id for tool_id in minted if tool_id not in answered]


def figures(stack: Stack, sid: str, workspace: Path | None = None) -> dict[str, Any]:
    """Ground truth: model calls (and turns asked more than once), Bash runs (and runs twice)."""
    requests = stack.model.requests_of(sid)
    per_turn = [assistant_count(r) for r in requests]
    runs_file = (workspace or stack.workspace) / RUNS
    runs = runs_file.read_text().split() if runs_file.exists() else []
    return {
        "model_calls": len(requests),
        "turns_asked_twice": len(per_turn) - len(set(per_turn)),
        "bash_runs": len(runs),
        "bash_runs_twice": len(runs) - len(set(runs)),
        "unanswered_ids": len(unanswered(stack, sid)),
    }


def kill_command(argv: tuple[str, ...]) -> None:
    """A Bash command left behind by a killed worker (its sandbox may outlive the horse)."""
    needle = "\0".join(argv).encode() + b"\0"
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if proc.joinpath("cmdline").read_bytes() == needle:
                    os.kill(int(proc.name), signal.SIGKILL)


def running(argv: tuple[str, ...]) -> bool:
    needle = "\0".join(argv).encode() + b"\0"
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if proc.joinpath("cmdline").read_bytes() == needle and alive(int(proc.name)):
                    return True
    return False


def assert_turn_one_answered_from_the_journal(stack: Stack, sid: str) -> None:
    """Turn 1 asked once; the next request answers both ids of the reply the fake sent."""
    requests = stack.model.requests_of(sid)
    assert [assistant_count(r) for r in requests].count(0) == 1, "turn 1 was asked again"
    [first] = [sent for body, sent in stack.model.server.replies if sid in str(body.get("system"))][:1]
    write_id, bash_id = (block.id for block in first.content if getattr(block, "type", "") == "tool_use")
    second = next(r for r in requests if assistant_count(r) == 1)
    results = {
        b["tool_use_id"]: b for b in second["messages"][-1]["content"] if b.get("type") == "tool_result"
    }
    assert set(results) == {write_id, bash_id}, results
    assert "Wrote 10 bytes" in str(results[write_id]["content"]) and not results[write_id].get("is_error")
    assert results[bash_id]["content"] == EFFECTS_UNKNOWN and results[bash_id]["is_error"]
    assert (stack.workspace / WRITTEN).read_text() == "made once\n"


def test_kill_9_while_bash_runs_after_a_finished_write(make_stack: Callable[..., Stack]) -> None:
    argv = ("sleep", f"1000.{time.monotonic_ns() % 10**9:09d}")
    stack = make_stack(lease_seconds=LEASE, model=JournalModel(argv)).start(workers=2)
    coordinator = Coordinator(stack)
    sid = stack.dispatch()
    try:
        wait_until(lambda: running(argv), "the Bash sleep", 30)
        coordinator.steer_once(sid)  # pending while the Bash runs
        stack.worker_running(sid).kill_tree(signal.SIGKILL)
        kill_command(argv)
        coordinator.steer_once(sid)  # accepted while no worker runs the session
        wait_until(lambda: attempt_of(stack, sid) == 2, "another worker to resume", LEASE + 15)
        record = stack.wait_finished(sid, 90)
    finally:
        kill_command(argv)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), stack.logs()
    found = figures(stack, sid)
    print(f"kill -9 during Bash after Write: {found}")
    assert_turn_one_answered_from_the_journal(stack, sid)
    assert (found["turns_asked_twice"], found["bash_runs_twice"], found["unanswered_ids"]) == (0, 0, 0), found
    verdict = verify(stack, sid, coordinator.accepted[sid])
    assert (verdict.lost, verdict.duplicated, verdict.undelivered) == (0, 0, 0), verdict.problems


POINTS = [
    ("after_model", 1),  # the reply is in, not journaled: the one re-ask left (nothing ran)
    ("after_reply", 1),  # journaled, no tool started
    ("in_tool", 2),  # Read done and journaled, Bash about to start
    ("after_tool", 1),  # Read ended, its result not journaled
    ("after_tool", 2),  # Bash ended, its result not journaled
    ("after_tool", 3),  # continue_workflow ended, not journaled
    ("after_drain", 1),
    ("after_checkpoint", 1),
]


@pytest.fixture(scope="module")
def crash_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack for every crash point: a fault kills only its session's work horse, so Redis,
    the web tier and the worker serve the next test (starting a stack costs seconds of CPU).
    Two processes: a session a failed test leaves running delays no other."""
    stack = Stack(
        tmp_path_factory.mktemp("crash-points"), lease_seconds=LEASE, faults=True, model=JournalModel()
    )
    try:
        yield stack.start(workers=1, processes=2)
    finally:
        stack.close()


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("point", "occurrence"), POINTS, ids=[f"{p}-{n}" for p, n in POINTS])
def test_a_crash_at_each_point_resumes_from_the_journal(
    crash_stack: Stack, point: str, occurrence: int, seed: int
) -> None:
    stack = crash_stack
    workspace = stack.new_workspace(f"ws-{point}-{occurrence}-{seed}")
    coordinator = Coordinator(stack)
    # the fault fires in turn `seed` (each turn passes each point once, in_tool/after_tool thrice)
    per_turn = 3 if point in ("in_tool", "after_tool") else 1
    sid = stack.dispatch(
        {"worktrainFault": {"point": point, "occurrence": occurrence + per_turn * (seed - 1)}},
        workspace=workspace,
    )
    coordinator.steer_once(sid)
    wait_until(lambda: int(stack.record(sid).get("turnCount") or 0) >= 1, "turn 1", 30)
    coordinator.steer_once(sid)
    wait_until(lambda: attempt_of(stack, sid) == 2, "the crash and the resume", LEASE + 30)
    coordinator.steer_once(sid)
    record = stack.wait_finished(sid, 90)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), stack.logs()
    found = figures(stack, sid, workspace)
    print(f"crash at {point}#{occurrence} (turn {seed}): {found}")
    asked_twice = 1 if point == "after_model" else 0  # a reply never journaled is asked for again
    assert (found["turns_asked_twice"], found["bash_runs_twice"]) == (asked_twice, 0), found
    # the reply lost with its worker: its 3 ids never reach a request (none of its tools ran)
    assert found["unanswered_ids"] == (3 if point == "after_model" else 0), found
    verdict = verify(stack, sid, coordinator.accepted[sid])
    assert (verdict.lost, verdict.duplicated, verdict.undelivered, verdict.disordered) == (0, 0, 0, 0), (
        verdict.problems
    )


def test_sigstop_past_the_lease_then_takeover(make_stack: Callable[..., Stack]) -> None:
    argv = ("sleep", f"6.{time.monotonic_ns() % 10**9:09d}")
    stack = make_stack(lease_seconds=LEASE, model=JournalModel(argv)).start(workers=1)
    coordinator = Coordinator(stack)
    sid = stack.dispatch()
    wait_until(lambda: running(argv), "the Bash sleep", 30)
    coordinator.steer_once(sid)
    frozen = stack.proc("worker1")
    stopped = stack.freeze_tier(frozen)
    horse = pid_of_worker(stack.record(sid)["worker"])
    try:
        stack.start_worker("worker2")
        wait_until(lambda: attempt_of(stack, sid) == 2, "worker2 to take the session over", LEASE + 20)
        coordinator.steer_once(sid)
        record = stack.wait_finished(sid, 90)
        assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), stack.logs()
        history = stack.client.lrange(f"wt:session:{{{sid}}}:history", 0, -1) if stack.client else []
    finally:
        stack.thaw_tier(frozen, stopped)
    # every chance for the thawed worker to write or run something: its attempt's work horse
    # runs on until it learns it lost the session and exits; then one heartbeat interval more
    wait_until(lambda: not alive(horse), "the thawed attempt's work horse to exit", 30)
    time.sleep(LEASE / 3)
    assert stack.client is not None
    assert stack.client.lrange(f"wt:session:{{{sid}}}:history", 0, -1) == history
    found = figures(stack, sid)
    print(f"SIGSTOP past the lease during Bash after Write, then takeover: {found}")
    assert_turn_one_answered_from_the_journal(stack, sid)
    assert (found["turns_asked_twice"], found["bash_runs_twice"], found["unanswered_ids"]) == (0, 0, 0), found
    verdict = verify(stack, sid, coordinator.accepted[sid])
    assert (verdict.lost, verdict.duplicated, verdict.undelivered) == (0, 0, 0), verdict.problems
