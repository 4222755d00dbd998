"""agentConfig, extended thinking and cost, the pure parts (docs/DEVELOPING.md): the layering and
its refusals, the request body's `thinking` and `max_tokens`, thinking blocks kept verbatim
through the history's JSON, the price table, the attempt header's loopback rule."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from daemon.agent import prices
from daemon.agent.model import ModelRequest, Usage, reply_from_sdk, request_bytes, wire_request
from daemon.agent.sendguard import ATTEMPT_HEADER, SendGate, is_loopback
from daemon.turn.messages import Message, RedactedThinkingBlock, TextBlock, ThinkingBlock, parse_message
from daemon.workflows.agentconfig import AgentConfig, problem

pytestmark = pytest.mark.unit

THINKING = {"type": "thinking", "thinking": "Let me see: the parser first.", "signature": "c2lnbmF0dXJl=="}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
TOOL = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "README.md"}}


def test_each_unset_field_falls_back_to_the_next_layer() -> None:
    env = AgentConfig(model="claude-sonnet-4-5", maxOutputTokens=8192, thinkingBudgetTokens=0)
    workflow = AgentConfig(model="claude-haiku-4-5", thinkingBudgetTokens=2048)
    dispatch = AgentConfig(maxOutputTokens=16000)
    assert dispatch.over(workflow).over(env) == AgentConfig(
        model="claude-haiku-4-5", maxOutputTokens=16000, thinkingBudgetTokens=2048
    )


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (
            AgentConfig(maxOutputTokens=4000, thinkingBudgetTokens=4000),
            "must be below maxOutputTokens (4000)",
        ),
        (AgentConfig(maxOutputTokens=4000, thinkingBudgetTokens=9000), "must be below maxOutputTokens"),
        (AgentConfig(maxOutputTokens=4000, thinkingBudgetTokens=500), "at least 1024"),
    ],
)
def test_a_budget_the_api_would_refuse_has_a_reason(config: AgentConfig, reason: str) -> None:
    found = problem(config)
    assert found is not None and reason in found


def test_a_budget_below_the_output_limit_or_none_is_fine() -> None:
    assert problem(AgentConfig(maxOutputTokens=4000, thinkingBudgetTokens=2048)) is None
    assert problem(AgentConfig(maxOutputTokens=4000, thinkingBudgetTokens=0)) is None


def test_a_request_with_a_budget_carries_thinking_and_the_sessions_max_tokens() -> None:
    request = ModelRequest("system", (), (Message(role="user", content=(TextBlock(text="hi"),)),))
    body = wire_request(request, "claude-opus-4-5", None, max_tokens=16000, thinking_budget=4096)
    assert (body["model"], body["max_tokens"]) == ("claude-opus-4-5", 16000)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    sent = json.loads(request_bytes(body))
    assert list(sent) == ["max_tokens", "messages", "model", "system", "tools", "thinking", "stream"]
    plain = wire_request(request, "m", None, max_tokens=100)
    assert "thinking" not in plain and plain["max_tokens"] == 100
    summary = ModelRequest("s", (), request.messages, max_tokens=800, allow_thinking=False)
    body = wire_request(summary, "m", None, max_tokens=16000, thinking_budget=4096)
    assert "thinking" not in body and body["max_tokens"] == 800


def test_thinking_and_redacted_thinking_are_kept_verbatim_and_in_place() -> None:
    data = {
        "content": [THINKING, REDACTED, {"type": "text", "text": "Reading."}, TOOL],
        "stop_reason": "tool_use",
    }
    reply = reply_from_sdk(data)
    assert [type(b) for b in reply.content][:2] == [ThinkingBlock, RedactedThinkingBlock]
    message = reply.message()
    assert message.wire()["content"] == data["content"]  # what goes back to the API
    assert parse_message(message.to_json()).wire() == message.wire()  # what a checkpoint keeps


def test_the_price_table_prices_usage_and_knows_provider_names() -> None:
    usage = Usage(input_tokens=1000, output_tokens=2000, cache_read_tokens=10_000, cache_write_tokens=3000)
    table = prices.price_table()
    expected = (1000 * 3.0 + 2000 * 15.0 + 10_000 * 0.3 + 3000 * 3.75) / 1_000_000
    for name in (
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "claude-sonnet-4-5@20250929",
    ):
        assert table.cost_usd(name, usage) == pytest.approx(expected), name
    assert table.cost_usd("claude-fake", usage) is None
    assert table.cost_usd(None, usage) is None


def test_the_prices_file_replaces_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps({"models": {"claude-fake": {"input": 1, "output": 2, "cacheWrite": 3, "cacheRead": 4}}})
    )
    monkeypatch.setenv(prices.PRICES_FILE_ENV, str(path))
    assert prices.cost_usd("claude-fake", Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)) == 10.0
    assert prices.cost_usd("claude-sonnet-4-5", Usage(1, 1)) is None


def test_the_attempt_header_goes_to_loopback_only() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("api.anthropic.com") and not is_loopback("bedrock-runtime.us-east-1.amazonaws.com")
    for host, sent in (
        ("127.0.0.1", True),
        ("api.anthropic.com", False),
        ("aiplatform.googleapis.com", False),
    ):
        request = SimpleNamespace(url=SimpleNamespace(host=host), headers={})
        SendGate(lambda: None, attempt="sess/1").check(request)
        assert (ATTEMPT_HEADER in request.headers) is sent, host


def test_the_providers_credential_chains_never_reach_an_agents_command() -> None:
    from daemon.tools.bash import scrub_env

    worker = {
        "AWS_ACCESS_KEY_ID": "AKID",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_SESSION_TOKEN": "t",
        "AWS_PROFILE": "prod",
        "AWS_REGION": "us-east-1",
        "AWS_BEARER_TOKEN_BEDROCK": "b",
        "GOOGLE_APPLICATION_CREDENTIALS": "/etc/sa.json",
        "ANTHROPIC_VERTEX_PROJECT_ID": "p",
        "CLOUD_ML_REGION": "us-east5",
        "ANTHROPIC_BEDROCK_BASE_URL": "https://bedrock.internal",
        "PATH": "/usr/bin",
    }
    assert scrub_env(worker) == {"PATH": "/usr/bin"}
