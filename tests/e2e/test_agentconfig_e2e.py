"""The model a team actually uses, end to end (docs/DEVELOPING.md): one real stack (redis-server,
`worktrain web`, `worktrain worker --processes 2`, the fake model answering by the session's
goal), the real anthropic SDK in the workers. Ground truth is what the fake model received.

- a dispatch's agentConfig is the model, max_tokens and thinking of every request of its
  session; a workflow's own agentConfig is the default; a child spawned with another model
  calls that model;
- with thinking, the fake answers thinking + redacted_thinking + tool_use and refuses (400,
  as the API does) a next request whose blocks are not the ones it signed, in their place:
  the session completing is the proof, and the next requests carry the blocks verbatim —
  also after a kill -9 of the worker mid-session and the resume on another process;
- an invalid combination is a 400 with the reason;
- costUsd on the record is the price table applied to the recorded usage; /metrics counts it.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest, Usage
from daemon.agent.prices import price_table
from daemon.fakemodel.coord import coordination_rule
from tests.crash.harness import TOKEN, SessionModel, Stack, pid_of_worker, stacks, wait_until

pytestmark = pytest.mark.e2e

FOUR = "crash-four"  # the harness's four-step workflow: four turns with the coordination rule
CHEAP = "claude-haiku-4-5"
STRONG = "claude-opus-4-5"
DEFAULTED = {
    "id": "strong-default",
    "name": "Strong by default",
    "description": "One step, on a strong model unless the dispatch says otherwise.",
    "version": "1.0.0",
    "agentConfig": {"model": STRONG, "maxOutputTokens": 3000, "modelTier": "strong"},
    "steps": [{"id": "do", "title": "Do it", "prompt": "Do what the goal says, then report."}],
}
ONE_STEP = {**DEFAULTED, "id": "one-step", "name": "One step"}
ONE_STEP.pop("agentConfig")


class CoordModel(SessionModel):
    def answer(self, request: ModelRequest) -> ModelReply:
        return coordination_rule(request)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    factory = stacks(tmp_path_factory.mktemp("agentconfig"), Stack)
    stack = next(factory)(model=CoordModel(latency=0.01), lease_seconds=2.0, idle_wait_seconds=30.0)
    for workflow in (DEFAULTED, ONE_STEP):
        (stack.tmp / "workflows" / f"{workflow['id']}.json").write_text(json.dumps(workflow))
    stack.start(workers=1, processes=2)
    try:
        yield stack
    finally:
        next(factory, None)


def dispatch(stack: Stack, workflow: str, agent: dict[str, Any] | None = None, **wants: Any) -> str:
    body: dict[str, Any] = {
        "workflowId": workflow,
        "goal": "fake:" + json.dumps(wants),
        "workspacePath": str(stack.workspace),
    }
    if agent is not None:
        body["agentConfig"] = agent
    answer = stack.http("POST", "/api/v2/auto/dispatch", body)
    assert answer.status == 202, answer
    return str(answer.body["data"]["sessionId"])


def sent(stack: Stack, sid: str) -> list[dict[str, Any]]:
    return [r for r in stack.model.requests_of(sid) if r.get("tools")]  # not a compaction's summary


def assistant_blocks(request: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [m["content"] for m in request["messages"] if m["role"] == "assistant"]


def strip_cache(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


def record_cost(record: dict[str, str], model: str) -> float | None:
    usage = Usage(
        int(record["inputTokens"]),
        int(record["outputTokens"]),
        int(record["cacheReadTokens"]),
        int(record["cacheWriteTokens"]),
    )
    return price_table().cost_usd(model, usage)


def test_a_dispatchs_agent_config_is_every_request_of_its_session(fleet: Stack) -> None:
    agent = {"model": CHEAP, "maxOutputTokens": 6000, "thinkingBudgetTokens": 2048}
    sid = dispatch(fleet, FOUR, agent, notes="a cheap thinker")
    record = fleet.wait_finished(sid, 90)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), fleet.logs()
    requests = sent(fleet, sid)
    assert len(requests) == 4
    for request in requests:
        assert (request["model"], request["max_tokens"]) == (CHEAP, 6000)
        assert request["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    # every earlier turn's blocks, in order and verbatim, in every later request
    turns = assistant_blocks(requests[-1])
    assert len(turns) == 3
    for turn in turns:
        assert [b["type"] for b in turn] == ["thinking", "redacted_thinking", "text", "tool_use"]
        assert turn[0]["signature"] and turn[1]["data"]
    for earlier, later in itertools.pairwise(requests[1:]):
        kept = [strip_cache(t) for t in assistant_blocks(earlier)]
        assert [strip_cache(t) for t in assistant_blocks(later)][: len(kept)] == kept
    assert len({t[0]["thinking"] for t in turns}) == 3  # fresh thinking on every call
    assert json.loads(record["agentConfig"]) == agent
    cost = record_cost(record, CHEAP)
    assert cost is not None and cost > 0
    assert float(record["costUsd"]) == pytest.approx(cost, abs=1e-6)
    detail = fleet.http("GET", f"/api/v2/sessions/{sid}").body["data"]
    assert detail["costUsd"] == pytest.approx(cost, abs=1e-6) and detail["agentConfig"] == agent


def test_the_workflows_agent_config_is_the_default_and_a_dispatch_overrides_a_field(fleet: Stack) -> None:
    plain = dispatch(fleet, DEFAULTED["id"], notes="defaults")
    cheaper = dispatch(fleet, DEFAULTED["id"], {"model": CHEAP}, notes="a cheaper model")
    for sid, model in ((plain, STRONG), (cheaper, CHEAP)):
        record = fleet.wait_finished(sid, 60)
        assert record["status"] == "completed", fleet.logs()
        [request] = sent(fleet, sid)
        assert (request["model"], request["max_tokens"]) == (model, 3000)
        assert "thinking" not in request
    unknown = dispatch(fleet, "one-step", notes="the environment's model")
    fleet.wait_finished(unknown, 60)
    assert sent(fleet, unknown)[0]["model"] == "claude-fake"  # WORKTRAIN_MODEL
    assert fleet.record(unknown)["costUsd"] == ""  # not in the price table: unknown, not a guess
    assert fleet.http("GET", f"/api/v2/sessions/{unknown}").body["data"]["costUsd"] is None


@pytest.mark.parametrize(
    ("agent", "reason"),
    [
        ({"maxOutputTokens": 2000, "thinkingBudgetTokens": 2000}, "must be below maxOutputTokens (2000)"),
        ({"thinkingBudgetTokens": 9000}, "must be below maxOutputTokens (8192)"),  # the default limit
        ({"thinkingBudgetTokens": 100}, "at least 1024"),
        ({"model": "claude-x", "temperature": 1}, "temperature"),
        ({"model": "bad model name"}, "model"),
    ],
)
def test_an_invalid_agent_config_is_a_400_with_the_reason(
    fleet: Stack, agent: dict[str, Any], reason: str
) -> None:
    body = {
        "workflowId": "one-step",
        "goal": "g",
        "workspacePath": str(fleet.workspace),
        "agentConfig": agent,
    }
    answer = fleet.http("POST", "/api/v2/auto/dispatch", body)
    assert answer.status == 400 and reason in json.dumps(answer.body), answer


def test_a_cheap_explorer_spawns_a_strong_fixer(fleet: Stack) -> None:
    fixer = {
        "workflowId": "one-step",
        "goal": "fake:" + json.dumps({"notes": "fixed with the strong model"}),
        "agentConfig": {"model": STRONG, "maxOutputTokens": 8000, "thinkingBudgetTokens": 4000},
    }
    parent = dispatch(fleet, FOUR, {"model": CHEAP}, spawn=[fixer], single=True)
    record = fleet.wait_finished(parent, 90)
    assert record["status"] == "completed", fleet.logs()
    [kid] = [c["sessionId"] for c in fleet.http("GET", f"/api/v2/sessions/{parent}").body["data"]["children"]]
    assert {r["model"] for r in sent(fleet, parent)} == {CHEAP}
    assert all("thinking" not in r for r in sent(fleet, parent))
    for request in sent(fleet, kid):
        assert (request["model"], request["max_tokens"], request["thinking"]["budget_tokens"]) == (
            STRONG,
            8000,
            4000,
        )
    kid_record = fleet.record(kid)
    assert float(kid_record["costUsd"]) == pytest.approx(record_cost(kid_record, STRONG), abs=1e-6)
    assert float(record["costUsd"]) == pytest.approx(record_cost(record, CHEAP), abs=1e-6)
    metrics = metrics_text(fleet)
    assert f'worktrain_cost_usd_total{{model="{STRONG}"}}' in metrics
    assert f'worktrain_cost_usd_total{{model="{CHEAP}"}}' in metrics


def metrics_text(stack: Stack) -> str:
    def served() -> str | None:
        request = urllib.request.Request(stack.url + "/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        return text if f'worktrain_cost_usd_total{{model="{STRONG}"}}' in text else None

    return str(wait_until(served, "the cost in /metrics", 10, every=0.5))


def test_thinking_blocks_survive_a_kill_9_and_the_resume(fleet: Stack) -> None:
    agent = {"model": CHEAP, "maxOutputTokens": 6000, "thinkingBudgetTokens": 2048}
    model = fleet.model
    sid = ""
    model.hold_when = lambda s, n: s == sid and n == 3  # the third call waits; two turns are checkpointed
    sid = dispatch(fleet, FOUR, agent, notes="killed mid-session")
    wait_until(lambda: model.held(sid), "the third call to be held", 60)
    before = sent(fleet, sid)[-1]  # what the killed attempt sent: turns 1 and 2 with their blocks
    os.kill(pid_of_worker(fleet.record(sid)["worker"]), signal.SIGKILL)
    time.sleep(0.5)
    model.release(sid)
    record = fleet.wait_finished(sid, 120)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), fleet.logs()
    assert int(record["attempt"]) >= 2
    after = [r for r in sent(fleet, sid) if r["_at"] > before["_at"]]
    assert after, "the resumed attempt called the model"
    kept = [strip_cache(t) for t in assistant_blocks(before)]
    assert len(kept) == 2 and all(t[0]["type"] == "thinking" for t in kept)
    for request in after:
        assert [strip_cache(t) for t in assistant_blocks(request)][:2] == kept
