"""A session four times longer than its window, end to end (docs/DEVELOPING.md): `worktrain worker`
processes against the fake model enforcing a 20,000-token window; killed with SIGKILL mid-way,
it resumes compacted on another horse and completes."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel import FakeModelServer, reply, summarising, text, tool
from daemon.fakemodel.server import parse_request
from daemon.fakemodel.usage import prompt_tokens
from daemon.turn.messages import RESUME_NOTE
from tests.agent.test_compaction import (
    STEPS,
    TURNS_PER_STEP,
    assert_current_step_and_its_steers_once,
    current_step,
    step_prompt,
)
from tests.crash.harness import NOTES, Stack, session_of, system_text, user_texts

pytestmark = pytest.mark.e2e

WINDOW = 20_000
LEASE = 2.0
KILLED_AFTER_TURN = 25
STEER_AT_CALLS = (5, 14, 23, 33)
WORKFLOW = {
    "id": "long-reader",
    "name": "Long reader",
    "steps": [{"id": f"s{i}", "title": f"Step {i}", "prompt": step_prompt(i)} for i in range(1, STEPS + 1)],
}


class ReaderModel:
    """The fake API with a 20,000-token window: every turn reads big.txt, each step is left
    after TURNS_PER_STEP answered turns, and a coordinator steers on some calls."""

    def __init__(self) -> None:
        self.server = FakeModelServer(rule=summarising(self.rule), max_prompt_tokens=WINDOW)
        self.answered: Counter[tuple[str, int]] = Counter()
        self.calls: Counter[str] = Counter()
        self.on_call: Callable[[str, int], None] = lambda sid, n: None
        self._lock = threading.Lock()

    def start(self) -> str:
        return self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def requests_of(self, sid: str) -> list[dict[str, Any]]:
        return [r for r in list(self.server.requests) if session_of(system_text(r)) == sid]

    def rule(self, request: ModelRequest) -> ModelReply:
        sid, step = session_of(request.system), current_step(request)
        with self._lock:
            self.answered[sid, step] += 1
            self.calls[sid] += 1
            done, n = self.answered[sid, step] >= TURNS_PER_STEP, self.calls[sid]
        self.on_call(sid, n)
        if done:
            return reply(
                text(f"[s{step}] done"), tool("Read", path="big.txt"), tool("continue_workflow", notes=NOTES)
            )
        return reply(text(f"[s{step}] reading, call {n}"), tool("Read", path="big.txt"))


def test_a_forty_turn_session_in_a_20000_token_window_completes_and_resumes_compacted(
    make_stack: Callable[..., Stack],
) -> None:
    model = ReaderModel()
    stack = make_stack(
        lease_seconds=LEASE, faults=True, model=model, extra_env={"WORKTRAIN_CONTEXT_TOKENS": str(WINDOW)}
    )
    (stack.tmp / "workflows" / "long-reader.json").write_text(json.dumps(WORKFLOW))
    (stack.workspace / "big.txt").write_text(("A line of a six-kilobyte file. " * 3 + "\n") * 64)
    steers: list[str] = []

    def coordinator(sid: str, n: int) -> None:
        if n in STEER_AT_CALLS:
            steers.append(f"<steer {len(steers) + 1}: keep the notes short>")
            assert stack.steer(sid, steers[-1]).status == 200

    model.on_call = coordinator
    stack.start(workers=1, processes=2)
    fault = {"worktrainFault": {"point": "after_checkpoint", "occurrence": KILLED_AFTER_TURN}}
    body = {
        "workflowId": "long-reader",
        "goal": "read",
        "workspacePath": str(stack.workspace),
        "context": fault,
    }
    answer = stack.http("POST", "/api/v2/auto/dispatch", body)
    assert answer.status == 202, answer
    sid = answer.body["data"]["sessionId"]
    done = stack.wait_finished(sid, timeout=120)
    assert (done["status"], done["outcome"], done["attempt"]) == ("completed", "workflow_complete", "2"), (
        stack.logs()
    )

    requests = [r for r in model.requests_of(sid) if r.get("tools")]
    sizes = [prompt_tokens(r) for r in requests]
    assert sum(1 for size in sizes if size <= WINDOW) == STEPS * TURNS_PER_STEP
    assert not any(a > WINDOW and b > WINDOW for a, b in itertools.pairwise(sizes))
    assert_current_step_and_its_steers_once(
        [parse_request(r) for r in requests if prompt_tokens(r) <= WINDOW], steers
    )

    compactions = stack.events_of(sid, "context_compacted")
    assert len(compactions) >= 5 and int(done["compactions"]) == len(compactions)
    assert (
        stack.client is not None and stack.client.llen(f"wt:session:{{{sid}}}:history") < 30
    )  # 81 uncompacted

    resumed = next(i for i, r in enumerate(requests) if RESUME_NOTE in user_texts(r))
    first_after = parse_request(requests[resumed])
    assert first_after.messages[1].role == "assistant" and first_after.messages[1].texts[0].startswith(
        "Summary"
    )
    assert sizes[resumed] <= WINDOW  # it carried on from the compacted checkpoint
    assert len(stack.events_of(sid, "session_resumed")) == 1

    # The prompt cache still works across compactions: every call but a compacting one (and
    # an attempt's first) reads the whole of the previous call's prompt from the cache.
    compacting = {c["turnId"] for c in compactions}
    started = [e["turnId"] for e in stack.events_of(sid, "turn_started")]
    first_of_attempt = {started[0], *(t for a, t in itertools.pairwise(started) if t != a + 1)}
    llm = {e["turnId"]: e for e in stack.events_of(sid, "llm_turn_completed")}
    checked = 0
    for turn, event in llm.items():
        previous = llm.get(turn - 1)
        if turn in compacting or turn in first_of_attempt or previous is None:
            continue
        previous_prompt = previous["inputTokens"] + previous["cacheReadTokens"] + previous["cacheWriteTokens"]
        assert event["cacheReadTokens"] >= previous_prompt - 5, (event, previous)
        checked += 1
    assert checked >= 20
