"""spawn_agent and signal_coordinator end to end (README's Sub-agents and questions): one real stack for
the module
(redis-server, `worktrain web`, `worktrain worker --processes 2`, the fake model answering by
the session's goal: daemon/fakemodel/coord.py), the real anthropic SDK in the workers.

Parents spawn children on the fleet and read their notes in the order given; a kill -9 of
the parent's or a child's worker process changes nothing but the attempt number; a cancel
cascades; an interrupt ends the parent's wait while the children go on; the depth limit is
a tool error; a question parks its session until `worktrain reply` answers it, and that
answer is the question's tool result, once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel.coord import coordination_rule, directive
from tests.crash.harness import ROOT, TOKEN, WORKTRAIN, SessionModel, Stack, pid_of_worker, stacks, wait_until

pytestmark = pytest.mark.e2e

ONE_STEP = {
    "id": "one-step",
    "name": "One step",
    "description": "One step: do the goal and report.",
    "version": "1.0.0",
    "steps": [{"id": "do", "title": "Do it", "prompt": "Do what the goal says, then report."}],
}
LONG = "crash-four"  # the harness's four-step workflow: a child that works for a while


class CoordModel(SessionModel):
    """The harness's fake API (holds, call counts, requests kept) answering by the goal; a
    goal's `delay` makes each of that session's model calls take so long."""

    def answer(self, request: ModelRequest) -> ModelReply:
        time.sleep(float(directive(request.system).get("delay", 0)))
        return coordination_rule(request)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    factory = stacks(tmp_path_factory.mktemp("subagents"), Stack)
    make = next(factory)
    stack = make(
        model=CoordModel(latency=0.01),
        lease_seconds=2.0,
        idle_wait_seconds=30.0,
        concurrency=4,
        extra_env={"WORKTRAIN_MAX_SPAWN_DEPTH": "1"},
    )
    (stack.tmp / "workflows" / "one-step.json").write_text(json.dumps(ONE_STEP))
    stack.start(workers=1, processes=2)
    try:
        yield stack
    finally:
        next(factory, None)  # kills every process of the stack


def goal(**wants: Any) -> str:
    return "fake:" + json.dumps(wants)


def child(workflow: str = "one-step", **wants: Any) -> dict[str, Any]:
    return {"workflowId": workflow, "goal": goal(**wants)}


def dispatch(stack: Stack, workflow: str = "one-step", **wants: Any) -> str:
    body = {"workflowId": workflow, "goal": goal(**wants), "workspacePath": str(stack.workspace)}
    answer = stack.http("POST", "/api/v2/auto/dispatch", body)
    assert answer.status == 202, answer
    return str(answer.body["data"]["sessionId"])


def session(stack: Stack, sid: str) -> dict[str, Any]:
    answer = stack.http("GET", f"/api/v2/sessions/{sid}")
    assert answer.status == 200, answer
    return dict(answer.body["data"])


def children_of(stack: Stack, sid: str) -> list[str]:
    return [c["sessionId"] for c in session(stack, sid)["children"]]


def waiting_for(stack: Stack, sid: str, what: str, timeout: float = 30.0) -> None:
    def parked() -> bool:
        record = stack.record(sid)
        return record.get("status") == "waiting" and record.get("waitingFor") == what

    wait_until(parked, f"{sid} waiting for {what}", timeout)


def last_tool_result(stack: Stack, sid: str, tool_name: str) -> str:
    """The content of the last tool_result answering a `tool_name` call in the session's last
    model request (found by the name: the fake mints fresh tool ids on every call)."""
    request = stack.model.requests_of(sid)[-1]
    blocks = [
        block
        for message in request["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
    ]
    ids = {b["id"] for b in blocks if b.get("type") == "tool_use" and b.get("name") == tool_name}
    for block in reversed(blocks):
        if block.get("type") == "tool_result" and block.get("tool_use_id") in ids:
            content = block.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    raise AssertionError(f"no tool_result for a {tool_name} call in {sid}'s last request")


def spawned_children(stack: Stack, parent: str) -> list[str]:
    """Every session whose record names `parent` (not only its list: a duplicate would show)."""
    assert stack.client is not None
    ids: Any = stack.client.zrange("wt:sessions", 0, -1)
    return [sid for sid in ids if stack.record(sid).get("parentSessionId") == parent]


def test_a_parent_spawns_three_children_in_parallel_and_reads_their_notes_in_order(fleet: Stack) -> None:
    specs = [
        {**child(notes="Alpha child: the parser handles every case."), "branchStrategy": "read-only"},
        child(fatal="Beta child cannot reach the database"),
        child(notes="Gamma child tried to delegate.", spawn=[child(notes="never")], single=True),
    ]
    parent = dispatch(fleet, spawn=specs)
    record = fleet.wait_finished(parent, 90)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), fleet.logs()

    kids = children_of(fleet, parent)
    assert len(kids) == 3 and sorted(kids) == sorted(spawned_children(fleet, parent))
    for kid in kids:
        rec = fleet.record(kid)
        assert (rec["parentSessionId"], rec["rootSessionId"], rec["depth"]) == (parent, parent, "1")
    assert [fleet.record(kid)["branchStrategy"] for kid in kids] == ["read-only", "none", "none"]
    statuses = [fleet.record(kid)["status"] for kid in kids]
    assert statuses == ["completed", "failed", "completed"]
    assert {pid_of_worker(fleet.record(kid)["worker"]) for kid in kids}  # each ran on a worker process

    result = last_tool_result(fleet, parent, "spawn_agent")
    reported = json.loads(result[result.index("{") :])["children"]
    assert [c["sessionId"] for c in reported] == kids  # in the order given
    assert "Alpha child" in reported[0]["notes"]
    assert (reported[1]["status"], reported[1]["outcome"]) == ("failed", "fatal_issue")
    assert reported[1]["issues"] == ["fatal: Beta child cannot reach the database"]
    # the grandchild was refused (WORKTRAIN_MAX_SPAWN_DEPTH=1) as a tool error the child read
    assert "spawn_agent refused" in reported[2]["notes"] and children_of(fleet, kids[2]) == []
    listed = fleet.http("GET", f"/api/v2/sessions?parent={parent}").body["data"]
    assert sorted(s["sessionId"] for s in listed["sessions"]) == sorted(kids) and listed["totalCount"] == 3

    tree = subprocess.run(
        [*WORKTRAIN, "session", parent, "--tree"], capture_output=True, text=True, cwd=ROOT, timeout=30,
        env={**os.environ, "WORKTRAIN_URL": fleet.url, "WORKTRAIN_API_TOKEN": TOKEN},
    )  # fmt: skip
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(parent) and [line.split()[0] for line in lines[1:]] == kids
    assert all(line.startswith("  sess_") for line in lines[1:])
    listed_cli = subprocess.run(
        [*WORKTRAIN, "sessions", "--parent", parent, "--json"], capture_output=True, text=True, cwd=ROOT,
        timeout=30, env={**os.environ, "WORKTRAIN_URL": fleet.url, "WORKTRAIN_API_TOKEN": TOKEN},
    )  # fmt: skip
    assert json.loads(listed_cli.stdout)["data"]["totalCount"] == 3, listed_cli.stderr


def test_kill_9_of_the_parents_worker_while_it_waits_finds_the_same_children(fleet: Stack) -> None:
    names = ("one", "two", "three")
    specs = [child(notes=f"Child {name} finished its slow part.", delay=1.5) for name in names]
    parent = dispatch(fleet, spawn=specs)
    waiting_for(fleet, parent, "children")
    # the wait is marked before its event is written: kill once both are there
    wait_until(lambda: fleet.events_of(parent, "children_spawned"), "the children_spawned event", 30)
    first = children_of(fleet, parent)
    assert len(first) == 3
    os.kill(pid_of_worker(fleet.record(parent)["worker"]), signal.SIGKILL)  # its process, mid-wait

    record = fleet.wait_finished(parent, 90)
    assert (record["status"], int(record["attempt"])) == ("completed", 2), fleet.logs()
    assert children_of(fleet, parent) == first and sorted(spawned_children(fleet, parent)) == sorted(first)
    spawned = fleet.events_of(parent, "children_spawned")
    assert len(spawned) == 2 and all(e["children"] == first for e in spawned)  # one per attempt, same ids
    result = last_tool_result(fleet, parent, "spawn_agent")
    for name in names:
        assert f"Child {name} finished its slow part." in result
    assert all(fleet.record(kid)["status"] == "completed" for kid in first)


def test_kill_9_of_a_childs_worker_resumes_the_child_and_the_parent_gets_its_result(fleet: Stack) -> None:
    parent = dispatch(fleet, spawn=[child(notes="The resumed child's notes.", delay=2.0)], single=True)
    kid = wait_until(lambda: (children_of(fleet, parent) or [None])[0], "the child", 30)
    wait_until(lambda: fleet.model.calls[kid] >= 1, "the child's first model call", 30)
    os.kill(pid_of_worker(fleet.record(kid)["worker"]), signal.SIGKILL)

    assert fleet.wait_finished(kid, 90)["status"] == "completed", fleet.logs()
    assert int(fleet.record(kid)["attempt"]) >= 2
    record = fleet.wait_finished(parent, 90)
    assert record["status"] == "completed", fleet.logs()
    assert "The resumed child's notes." in last_tool_result(fleet, parent, "spawn_agent")
    assert spawned_children(fleet, parent) == [kid]


def test_cancel_of_a_waiting_parent_cancels_every_child(fleet: Stack) -> None:
    specs = [child(LONG, notes="Working through four slow steps.", delay=1.0) for _ in range(3)]
    parent = dispatch(fleet, spawn=specs)
    waiting_for(fleet, parent, "children")
    kids = children_of(fleet, parent)
    assert fleet.http("POST", f"/api/v2/sessions/{parent}/cancel", {}).status == 202
    assert fleet.wait_finished(parent, 30)["status"] == "cancelled", fleet.logs()
    for kid in kids:
        assert fleet.wait_finished(kid, 30)["status"] == "cancelled", fleet.record(kid)


def test_an_interrupt_ends_the_parents_wait_and_the_child_goes_on(fleet: Stack) -> None:
    slow = child(LONG, notes="A child that takes its time.", delay=1.0)
    parent = dispatch(fleet, spawn=[slow], single=True)
    waiting_for(fleet, parent, "children")
    kid = children_of(fleet, parent)[0]
    calls_before = len(fleet.model.requests_of(parent))
    steer = {"text": "Stop waiting for the child and finish now.", "mode": "interrupt"}
    assert fleet.http("POST", f"/api/v2/sessions/{parent}/steer", steer).status == 200

    called = lambda: len(fleet.model.requests_of(parent)) > calls_before  # noqa: E731
    wait_until(called, "the parent's next model call", 30)
    assert fleet.record(kid)["status"] in ("queued", "running")  # it did not wait for the child
    result = last_tool_result(fleet, parent, "spawn_agent")
    assert "Interrupted by the coordinator" in result and kid in result
    request = fleet.model.requests_of(parent)[-1]
    assert json.dumps(request["messages"][-1]).count("Stop waiting for the child and finish now.") == 1
    assert fleet.wait_finished(parent, 30)["status"] == "completed"
    assert fleet.wait_finished(kid, 60)["status"] == "completed"  # the child went on by itself


def test_a_question_waits_for_worktrain_reply_and_gets_it_once_as_its_result(fleet: Stack) -> None:
    fleet.model.hold_when = lambda sid, n: n == 1 and sid == held[0]
    held = [""]
    body = {"workflowId": "one-step", "goal": goal(ask="Which database should I use?"),
            "workspacePath": str(fleet.workspace)}  # fmt: skip
    sid = str(fleet.http("POST", "/api/v2/auto/dispatch", body).body["data"]["sessionId"])
    held[0] = sid
    wait_until(lambda: fleet.model.held(sid), "the first model call", 30)

    polled: dict[str, Any] = {}

    def long_poll() -> None:
        started = time.monotonic()
        answer = fleet.http("GET", f"/api/v2/sessions/{sid}/signals?since=0&wait=30", timeout=40)
        polled.update(answer=answer, seconds=time.monotonic() - started)

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(0.5)
    assert poller.is_alive()  # it waits: there is no signal yet
    fleet.model.release(sid)
    poller.join(40)
    signals = polled["answer"].body["data"]["signals"]
    assert [(s["kind"], s["summary"], s["wait"]) for s in signals] == [
        ("question", "Which database should I use?", True)
    ]  # answered by the signal, not by the timeout (which answers an empty page)
    assert polled["seconds"] < 30

    waiting_for(fleet, sid, "reply")
    question = session(fleet, sid)["pendingQuestion"]
    assert question["summary"] == "Which database should I use?"
    answer = "Use PostgreSQL 16, the one in docker-compose."
    env = {**os.environ, "WORKTRAIN_URL": fleet.url, "WORKTRAIN_API_TOKEN": TOKEN}
    replied = subprocess.run([*WORKTRAIN, "reply", sid, answer], capture_output=True, text=True, cwd=ROOT,
                             env=env, timeout=30)  # fmt: skip
    assert replied.returncode == 0, replied.stderr

    record = fleet.wait_finished(sid, 30)
    assert record["status"] == "completed", fleet.logs()
    asked = fleet.model.requests_of(sid)[1]  # the request after the question
    assert json.dumps(asked).count(answer) == 1
    assert answer in last_tool_result(fleet, sid, "signal_coordinator")
    steer = fleet.journal(sid)
    delivered = [e for e in steer if e.get("type") == "delivered"]
    assert len(delivered) == 1 and delivered[0]["turnId"] == "2"
    listed = subprocess.run([*WORKTRAIN, "signals", sid], capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=30)  # fmt: skip
    assert "question: Which database should I use?" in listed.stdout
    everyone = subprocess.run(
        [*WORKTRAIN, "signals"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=30
    )
    assert f"{sid}  #1 turn 1  question: Which database should I use? (waits for a reply)" in everyone.stdout
    mirror = Path(fleet.tmp / "data" / "signals" / f"{sid}.jsonl").read_text().splitlines()
    assert [json.loads(line)["offset"] for line in mirror] == [1]


async def coordinate_over_mcp(stack: Stack, parent: str) -> dict[str, Any]:
    """A real MCP client (`worktrain mcp` over stdio) reads the tree and answers the question."""
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=WORKTRAIN[0],
        args=[*WORKTRAIN[1:], "mcp"],
        env={**os.environ, "WORKTRAIN_URL": stack.url, "WORKTRAIN_API_TOKEN": TOKEN},
        cwd=str(ROOT),
    )
    seen: dict[str, Any] = {}
    async with Client(params, read_timeout_seconds=60) as client:
        while True:
            tree = (await client.call_tool("get_session", {"sessionId": parent})).structured_content
            if tree["children"]:
                break
            await asyncio.sleep(0.1)
        kid = tree["children"][0]["sessionId"]
        asked = await client.call_tool("get_signals", {"sessionId": kid, "wait": 30})
        seen["question"] = asked.structured_content["signals"]
        child = (await client.call_tool("get_session", {"sessionId": kid})).structured_content
        seen["child"] = child
        replied = await client.call_tool("reply", {"sessionId": kid, "text": "Ship it on Friday."})
        seen["reply"] = replied.structured_content
    return seen


def test_a_coordinator_over_mcp_reads_the_tree_and_answers_a_childs_question(fleet: Stack) -> None:
    parent = dispatch(fleet, spawn=[child(ask="When do we ship?")], single=True)
    outcome: list[Any] = []

    def run() -> None:  # a thread of its own: no event loop of another test in the way
        try:
            outcome.append(asyncio.run(coordinate_over_mcp(fleet, parent)))
        except BaseException as exc:  # noqa: BLE001 -- handed back to the test's thread
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(timeout=120)
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    seen = outcome[0]
    assert [(s["kind"], s["summary"]) for s in seen["question"]] == [("question", "When do we ship?")]
    assert seen["child"]["parentSessionId"] == parent and seen["child"]["depth"] == 1
    assert seen["reply"]["status"] == "accepted"
    assert fleet.wait_finished(parent, 60)["status"] == "completed", fleet.logs()
    assert "Ship it on Friday." in last_tool_result(fleet, parent, "spawn_agent")


def readme_coordinator() -> str:
    """The README's coordinator script (the python block under "Sub-agents and questions")."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Sub-agents and questions") :]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readmes_coordinator_script_answers_a_question(fleet: Stack) -> None:
    sid = dispatch(fleet, ask="Which branch should I use?")
    env = {**os.environ, "WORKTRAIN_URL": fleet.url, "WORKTRAIN_API_TOKEN": TOKEN}
    script = subprocess.run(
        [WORKTRAIN[0], "-c", readme_coordinator(), sid], input="The release branch.\n", capture_output=True,
        text=True, env=env, timeout=90,
    )  # fmt: skip
    assert script.returncode == 0, script.stderr
    assert "question Which branch should I use?" in script.stdout
    assert fleet.wait_finished(sid, 30)["status"] == "completed"
    assert "The release branch." in last_tool_result(fleet, sid, "signal_coordinator")


def test_a_question_answered_after_a_kill_9_reaches_the_agent_as_its_tool_result(fleet: Stack) -> None:
    """docs/durability.md: the question's call is in the journal, waiting; the resumed attempt waits
    on and the reply is that call's result — not text in a re-asked turn's opening message."""
    sid = dispatch(fleet, ask="Which port should I use?")
    waiting_for(fleet, sid, "reply")
    os.kill(pid_of_worker(fleet.record(sid)["worker"]), signal.SIGKILL)
    answer = "Port 8080, as the README says."
    assert fleet.http("POST", f"/api/v2/sessions/{sid}/steer", {"text": answer}).status == 200

    record = fleet.wait_finished(sid, 90)
    assert (record["status"], int(record["attempt"])) == ("completed", 2), fleet.logs()
    requests = fleet.model.requests_of(sid)
    first_turns = [r for r in requests if not any(m["role"] == "assistant" for m in r["messages"])]
    assert len(first_turns) == 1, "the question's turn was asked again"
    assert answer in last_tool_result(fleet, sid, "signal_coordinator")
    asked = next(r for r in requests if sum(m["role"] == "assistant" for m in r["messages"]) == 1)
    texts = [
        b.get("text", "") for m in asked["messages"] if isinstance(m["content"], list) for b in m["content"]
    ]
    assert not any(answer in t for t in texts)  # a tool result, not a text block
    assert json.dumps(asked).count(answer) == 1
