"""Workflows through real processes: `worktrain web` and `worktrain worker` against a real
redis-server, the real anthropic SDK against the fake model (tests/crash/harness.py).

- WorkRail's five confirmed sequences: the same step ids in order, titles rendered;
- kill -9 mid-loop: the resumed session carries on in the same iteration, same context;
- `"gates": "steer"`: a requireConfirmation step waits (status waiting, waitingFor
  confirmation) until a steer, and the next step arrives with it.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import main
from daemon.agent.sendguard import ATTEMPT_HEADER
from daemon.turn.messages import RESUME_NOTE
from tests.crash.harness import TOKEN, session_of, stacks, system_text, user_texts, wait_until
from tests.workflows.conftest import WorkflowStack
from tests.workflows.samples import WORKRAIL, workrail_folder

pytestmark = pytest.mark.e2e


def results_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The continue_workflow results of a recorded request's history, parsed."""
    names = {
        block["id"]: block["name"]
        for message in request["messages"]
        if message["role"] == "assistant"
        for block in message["content"]
        if block.get("type") == "tool_use"
    }
    found = []
    for message in request["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result" and names.get(block["tool_use_id"]) == "continue_workflow":
                content = block["content"]
                text = content if isinstance(content, str) else "".join(c.get("text", "") for c in content)
                found.append(json.loads(text))
    return found


def last_request(stack: WorkflowStack, sid: str) -> dict[str, Any]:
    return [r for r in stack.model.server.requests if session_of(system_text(r)) == sid][-1]


def advanced_from(stack: WorkflowStack, sid: str) -> list[str]:
    return [e["fromStepId"] for e in stack.events(sid) if e["kind"] == "step_advanced"]


def test_workrails_example_sequences_through_a_real_worker(
    make_workflow_stack: Callable[..., WorkflowStack],
) -> None:
    folder = workrail_folder()
    examples = json.loads((WORKRAIL / "examples.json").read_text())
    ids = {f"workflows/{p.name}": json.loads(p.read_text())["id"] for p in folder.glob("*.json")}
    stack = make_workflow_stack()
    loop = {"id": "l", "type": "loop", "title": "L", "loop": {"type": "for", "maxIterations": 2}, "body": "x"}
    stack.use_workflows(
        *sorted(folder.glob("*.json")), inline={"broken": {"id": "b", "name": "B", "steps": [loop]}}
    )
    calls = {
        ids[e["workflowFile"]]: [
            {"context": c, "artifacts": a}
            for c, a in zip(e["contexts"], e.get("artifacts") or [None] * len(e["contexts"]), strict=True)
        ]
        for e in examples
    }
    stack.walk(calls)
    stack.start(workers=1, processes=2)
    answer = stack.http("GET", "/api/v2/workflows")
    reason = "Step 'l': for loop requires a count; Step 'l': Loop body references non-existent step 'x'"
    assert answer.body["data"]["skipped"] == [{"file": "broken.json", "reason": reason}]
    assert len(answer.body["data"]["workflows"]) == 48 + 3 + 1  # WorkRail's, the bundled ones, crash-four
    env = {"WORKTRAIN_URL": stack.url, "WORKTRAIN_API_TOKEN": TOKEN}
    listed = CliRunner().invoke(main, ["workflows"], env=env)
    assert listed.exit_code == 0 and "1 file(s) skipped" in listed.stdout and "broken.json" in listed.stdout
    assert "wr.coding-task" in listed.stdout
    stack.model.server.hold()  # read each session's first step before any worker moves it on
    sessions = {}
    for example in examples:
        sid = stack.dispatch_workflow(ids[example["workflowFile"]])
        record = stack.session(sid)
        sessions[example["id"]] = (sid, record["stepId"], record["stepTitle"])
    stack.model.server.release()
    for example in examples:
        sid, first_id, first_title = sessions[example["id"]]
        record = stack.wait_finished(sid, timeout=60)
        assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), record
        advanced = [r["step"] for r in results_of(last_request(stack, sid)) if r["status"] == "advanced"]
        presented = [first_id, *(s["id"] for s in advanced)]
        titles = [first_title, *(s["title"] for s in advanced)]
        print(f"{example['id']}: {' -> '.join(presented)}")
        assert presented == example["expectedStepIds"], example["id"]
        assert titles == example["expectedTitles"], example["id"]
        assert advanced_from(stack, sid) == example["expectedStepIds"]


LOOP_WORKFLOW = {
    "id": "loop-resume",
    "name": "Loop resume",
    "steps": [
        {"id": "plan", "title": "Plan", "prompt": "Plan the edits."},
        {
            "id": "passes",
            "type": "loop",
            "title": "One pass per file",
            "loop": {"type": "forEach", "items": "files", "maxIterations": 5},
            "body": [
                {"id": "edit", "title": "Edit {{currentItem}}", "prompt": "Edit {{currentItem}}."},
                {
                    "id": "check",
                    "title": "Check {{currentItem}}",
                    "prompt": "Check {{currentItem}} (pass {{currentIteration}}).",
                },
            ],
        },
        {"id": "report", "title": "Report", "prompt": "Report {{k_plan}}{{k_a}}{{k_b}}{{k_c}}."},
    ],
}
LOOP_CALLS = [
    {"context": {"files": ["a", "b", "c"], "k_plan": 1}},
    {"context": {"k_a": 1}},
    {},
    {"context": {"k_b": 1}},
    {},  # `check b`: the call the kill interrupts (or that comes right after it)
    {"context": {"k_c": 1}},
    {},
    {},
]
LOOP_SEQUENCE = ["plan", "edit", "check", "edit", "check", "edit", "check", "report"]


GATED = {
    "id": "gated",
    "name": "Gated",
    "steps": [
        {"id": "draft", "title": "Draft", "prompt": "Draft it."},
        {"id": "ship", "title": "Ship", "prompt": "Ship it.", "requireConfirmation": {"var": "risky"}},
        {"id": "announce", "title": "Announce", "prompt": "Announce it."},
    ],
}


@pytest.fixture(scope="module")
def looping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkflowStack]:
    """One stack for the kill -9 and the gate tests: a fault kills only its session's work
    horse (faults are armed by a session's own context), so Redis, the web tier and the
    worker's three processes serve every test in turn."""
    factory = stacks(tmp_path_factory.mktemp("looping"), WorkflowStack)
    stack = next(factory)(lease_seconds=2.0, faults=True)
    stack.use_workflows(inline={"loop-resume": LOOP_WORKFLOW, "gated": GATED})
    stack.walk({"loop-resume": LOOP_CALLS, "gated": [{"context": {"risky": "yes"}}, {}, {}]})
    try:
        yield stack.start(workers=1, processes=3)
    finally:
        next(factory, None)


@pytest.mark.parametrize(
    ("point", "occurrence"),
    [("after_checkpoint", 4), ("in_tool", 5), ("after_model", 5)],
    ids=["after-checkpoint-at-check-b", "before-the-check-b-call", "after-the-check-b-reply"],
)
def test_kill_9_mid_loop_resumes_in_the_same_iteration_with_the_same_context(
    looping: WorkflowStack, point: str, occurrence: int
) -> None:
    stack = looping
    fault = {"worktrainFault": {"point": point, "occurrence": occurrence}}
    sid = stack.dispatch_workflow("loop-resume", context=fault)
    record = stack.wait_finished(sid, timeout=60)
    assert (record["status"], record["outcome"], record["attempt"]) == ("completed", "workflow_complete", "2")
    requests = [r for r in stack.model.server.requests if session_of(system_text(r)) == sid]
    # The history is the truth (a SIGKILL loses the events its turn still held back).
    after = [r["step"] for r in results_of(requests[-1]) if r["status"] == "advanced"]
    assert ["plan", *(s["id"] for s in after)] == LOOP_SEQUENCE  # no step again, none skipped
    # the resumed attempt's first request: after a re-ask (`after_model`, `after_checkpoint`) it
    # carries the resume note; after `in_tool` the journaled call was finished without one
    resumed = next(r for r in requests if r["_headers"][ATTEMPT_HEADER] == f"{sid}/2")
    assert (RESUME_NOTE in user_texts(resumed)) == (point != "in_tool")
    assert "Check b (pass 2)." in user_texts(resumed)  # the pending step of iteration 2
    assert [s["title"] for s in after[-3:]] == ["Edit c", "Check c", "Report"]
    assert after[-1]["prompt"] == "Report 1111."  # context set before the kill is all there
    assert [e["kind"] for e in stack.events(sid)].count("session_resumed") == 1


FAULT_POINTS = ("before_turn", "after_model", "in_tool", "after_drain", "after_checkpoint")


def test_kill_9_at_seeded_random_points_of_a_looping_session(looping: WorkflowStack) -> None:
    """Three sessions at once, each killed at a random point (daemon/host/faults.py) and turn."""
    seed = int(os.environ.get("WORKTRAIN_CRASH_SEED") or time.time_ns() % 1_000_000)
    rng = random.Random(seed)
    points = [rng.choice(FAULT_POINTS) for _ in range(3)]
    # The last turn completes the workflow and returns before its after_checkpoint point.
    plan = [(p, rng.randint(1, len(LOOP_CALLS) - (p == "after_checkpoint"))) for p in points]
    print(f"seed={seed} (WORKTRAIN_CRASH_SEED={seed} replays it): {plan}")
    stack = looping
    sids = [
        stack.dispatch_workflow("loop-resume", context={"worktrainFault": {"point": p, "occurrence": n}})
        for p, n in plan
    ]
    for sid, (point, occurrence) in zip(sids, plan, strict=True):
        record = stack.wait_finished(sid, timeout=60)
        assert (record["status"], record["attempt"]) == ("completed", "2"), (point, occurrence, record)
        after = [r["step"] for r in results_of(last_request(stack, sid)) if r["status"] == "advanced"]
        assert ["plan", *(s["id"] for s in after)] == LOOP_SEQUENCE, (point, occurrence)
        assert after[-1]["prompt"] == "Report 1111.", (point, occurrence)


@pytest.mark.parametrize("gates", ["steer", "skip"])
def test_a_confirmation_step_waits_for_a_steer_when_gates_is_steer(
    looping: WorkflowStack, gates: str
) -> None:
    stack = looping
    sid = stack.dispatch_workflow("gated", gates=gates)
    if gates == "skip":
        record = stack.wait_finished(sid, timeout=30)
        assert advanced_from(stack, sid) == ["draft", "ship", "announce"]
        return
    wait_until(lambda: stack.session(sid).get("status") == "waiting", "the gate to wait", timeout=30)
    record = stack.session(sid)
    assert (record["waitingFor"], record["stepId"], record["gates"]) == ("confirmation", "announce", "steer")
    time.sleep(0.5)
    assert stack.session(sid)["status"] == "waiting"  # it waits: nothing moves without a steer
    assert stack.steer(sid, "Approved: go ahead and announce.").status == 200
    record = stack.wait_finished(sid, timeout=30)
    assert (record["status"], record["waitingFor"]) == ("completed", "")
    assert advanced_from(stack, sid) == ["draft", "ship", "announce"]
    final = user_texts(last_request(stack, sid))
    assert "Announce it.\n\nApproved: go ahead and announce." in final  # step text, then the steer
