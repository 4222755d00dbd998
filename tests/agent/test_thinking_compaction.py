"""Extended thinking through compaction (docs/DEVELOPING.md): a session with a thinking budget
that outgrows its window four times over completes, on the real attempt, the real SDK and
the fake model over HTTP. The fake answers every turn with thinking + redacted_thinking +
tool_use and refuses (400, as the API does) a request whose last assistant turn does not
carry the blocks it signed, first and verbatim: so the session completing proves each
request carried them — across every compaction; and each compacted request carries the
newest assistant turns exactly as the request before the compaction did. The summary calls ask
for no thinking."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.model import AnthropicModel, make_client
from daemon.fakemodel import FakeModelServer, summarising
from tests.agent.conftest import Harness
from tests.agent.test_compaction import STEPS, TURNS_PER_STEP, WORKFLOW, long_session, reader, window_settings

pytestmark = pytest.mark.redis


def thinking_turns(request: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The request's assistant turns that opened with thinking (not a compaction's summary)."""
    turns = [
        [{k: v for k, v in block.items() if k != "cache_control"} for block in m["content"]]
        for m in request["messages"]
        if m["role"] == "assistant"
    ]
    return [t for t in turns if t and t[0]["type"] == "thinking"]


def test_thinking_blocks_survive_every_compaction(harness: Harness) -> None:
    long_session(harness)
    server = FakeModelServer(rule=summarising(reader()), max_prompt_tokens=20_000)
    server.start()
    try:
        client = make_client("fake-key", server.url)
        model = AnthropicModel("claude-haiku-4-5", client=client, max_tokens=4000, thinking_budget=2048)
        outcome = harness.run(model, extra=WORKFLOW, calls=window_settings())  # type: ignore[arg-type]
    finally:
        server.stop()
    assert outcome == "workflow_complete", harness.record()
    requests = list(server.requests)
    turns = [r for r in requests if r.get("tools")]
    summaries = [r for r in requests if not r.get("tools")]
    assert len(turns) == STEPS * TURNS_PER_STEP
    assert summaries and all("thinking" not in r for r in summaries)
    assert all(r["thinking"] == {"type": "enabled", "budget_tokens": 2048} for r in turns)
    for request in turns[1:]:  # the turn being continued opens with its blocks
        blocks = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "assistant")
        kinds = [b["type"] for b in blocks]
        assert kinds[:3] == ["thinking", "redacted_thinking", "text"] and set(kinds[3:]) == {"tool_use"}
    compactions = harness.events.of("context_compacted")
    assert len(compactions) >= 2
    # around each summary call: the turns the compacted request kept are the newest turns of
    # the request before it (plus the reply to that one), verbatim
    index = {id(r): i for i, r in enumerate(requests)}
    for summary in summaries:
        at = index[id(summary)]
        before = next(r for r in reversed(requests[:at]) if r.get("tools"))
        after = next(r for r in requests[at + 1 :] if r.get("tools"))
        kept, earlier = thinking_turns(after), thinking_turns(before)
        common = kept if kept[-1] in earlier else kept[:-1]
        assert common and common == earlier[len(earlier) - len(common) :]
        summaries_kept = [
            m for m in after["messages"] if m["role"] == "assistant" and m["content"][0]["type"] == "text"
        ]
        assert summaries_kept  # the compacted request: the summary in place of the older turns
    assert harness.record().compactions == len(compactions)
