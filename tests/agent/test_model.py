"""The Anthropic adapter against the project's fake Messages API, over real HTTP.

The real `anthropic` SDK does the talking (streaming), so these tests also pin the fake's
wire format to what the installed SDK parses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from daemon.fakemodel import FakeError, FakeModelServer, demo_rule, reply, text, tool
from daemon.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from daemon.model import (
    AnthropicModel,
    ModelError,
    ModelRequest,
    ModelStalled,
    RealApiForbidden,
    forbid_real_api,
    wire_request,
)
from daemon.tools import default_toolbox


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


def request(*messages: Message) -> ModelRequest:
    first = Message(role="user", content=(TextBlock(text="Start."),))
    return ModelRequest("You are a test.", default_toolbox().specs(), [first, *messages])


def model_for(server: FakeModelServer, **kwargs: Any) -> AnthropicModel:
    return AnthropicModel("claude-test", api_key="test-key", base_url=server.url, **kwargs)


def test_streamed_reply_with_text_and_tool_calls(server: FakeModelServer) -> None:
    big_input = {"path": "docs/x.md", "content": "line\n" * 200}
    server.script.extend([reply(text("Writing it."), tool("Write", tool_id="toolu_1", **big_input))])
    answer = model_for(server).complete(request())
    assert answer.stop_reason == "tool_use"
    assert answer.content == (
        TextBlock(text="Writing it."),
        ToolUseBlock(id="toolu_1", name="Write", input=big_input),
    )
    assert answer.usage.output_tokens == 5 and answer.usage.cache_write_tokens > 0
    again = model_for(server)
    server.script.extend([reply(text("ok"))])
    assert again.complete(request()).usage.cache_read_tokens > 0  # same tools+system prefix


def test_request_carries_cache_control_model_and_history(server: FakeModelServer) -> None:
    server.script.extend([reply(text("done"))])
    history = (
        Message(role="assistant", content=(ToolUseBlock(id="t1", name="Read", input={"path": "a"}),)),
        Message(
            role="user", content=(ToolResultBlock(tool_use_id="t1", content="A"), TextBlock(text="steer"))
        ),
    )
    model_for(server).complete(request(*history))
    [sent] = server.requests
    assert sent["model"] == "claude-test" and sent["stream"] is True
    assert sent["system"] == [
        {"type": "text", "text": "You are a test.", "cache_control": {"type": "ephemeral"}}
    ]
    assert sent["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in t for t in sent["tools"][:-1])
    last = sent["messages"][-1]
    assert last["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "A",
        "is_error": False,
    }
    assert last["content"][1] == {"type": "text", "text": "steer", "cache_control": {"type": "ephemeral"}}
    assert sent["_headers"]["authorization"] == "Bearer test-key"


def test_a_growing_history_is_dumped_once_per_message_and_sent_the_same(server: FakeModelServer) -> None:
    server.script.extend([reply(text("a")), reply(text("b"))])
    model = model_for(server)
    first = request().messages[0]  # the loop passes the same Message objects turn after turn
    turn1 = (first, Message(role="assistant", content=(TextBlock(text="one"),)))
    turn2 = (*turn1, Message(role="user", content=(TextBlock(text="two"),)))
    model.complete(ModelRequest("You are a test.", default_toolbox().specs(), turn1))
    cached = dict(model.wire_cache._entries)
    assert len(cached) == 2
    base = ModelRequest("You are a test.", default_toolbox().specs(), turn2)
    model.complete(base)
    for key, (message, wire) in cached.items():  # reused as they were: not dumped again, not changed
        assert model.wire_cache._entries[key][1] is wire and "cache_control" not in wire["content"][-1]
        assert wire == message.wire()
    uncached = wire_request(base, "claude-test")
    assert server.requests[1]["messages"] == uncached["messages"]
    assert uncached["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_api_error_after_the_sdk_retries_is_a_model_error(server: FakeModelServer) -> None:
    server.script.extend([FakeError(529, "overloaded_error", "Overloaded", retry=True)] * 3)
    with pytest.raises(ModelError, match="529: overloaded_error: Overloaded"):
        model_for(server, max_retries=2).complete(request())
    assert len(server.requests) == 3  # the SDK retried twice


def test_a_retried_error_then_success_is_invisible(server: FakeModelServer) -> None:
    server.script.extend([FakeError(500, "api_error", "blip", retry=True), reply(text("fine"))])
    assert model_for(server).complete(request()).content == (TextBlock(text="fine"),)


def test_silence_longer_than_the_stall_limit_is_a_stall(server: FakeModelServer) -> None:
    server.latency = 1.5
    server.script.extend([reply(text("late"))])
    with pytest.raises(ModelStalled):
        model_for(server, stall_seconds=0.3, max_retries=0).complete(request())


def test_unreachable_api_is_a_model_error() -> None:
    model = AnthropicModel("m", api_key="k", base_url="http://127.0.0.1:9", max_retries=0)
    with pytest.raises(ModelError, match="unreachable"):
        model.complete(request())


def test_the_real_api_is_refused_while_the_test_guard_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RealApiForbidden):
        AnthropicModel("m", api_key="k", base_url="https://api.anthropic.com")
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    with pytest.raises(RealApiForbidden):
        AnthropicModel("m", api_key="k")  # the SDK's default is the real API
    monkeypatch.setenv("WORKTRAIN_FORBID_REAL_API", "0")
    forbid_real_api("https://api.anthropic.com")  # off: no error


# --- the fake server itself -----------------------------------------------------------------


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def test_fake_answers_plain_json_and_errors_in_the_api_shape(server: FakeModelServer) -> None:
    server.script.extend([reply(text("hi")), FakeError(400, "invalid_request_error", "bad")])
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hello"}]}
    status, message, _ = post(f"{server.url}/v1/messages", body)
    assert (
        status == 200
        and message["type"] == "message"
        and message["content"] == [{"type": "text", "text": "hi"}]
    )
    assert message["stop_reason"] == "end_turn" and message["usage"]["input_tokens"] > 0
    status, error, headers = post(f"{server.url}/v1/messages", body)
    assert status == 400 and error == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }
    assert headers["x-should-retry"] == "false"
    status, error, _ = post(f"{server.url}/v1/messages", body)
    assert status == 500 and "exhausted" in error["error"]["message"]


def test_fake_holds_answers_until_released(server: FakeModelServer) -> None:
    import threading

    server.script.extend([reply(text("held reply"))])
    server.hold()
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(model_for(server).complete(request())))
    thread.start()
    server.wait_for_requests(1)
    thread.join(0.3)
    assert thread.is_alive() and result == []  # recorded, not answered
    server.release()
    thread.join(10)
    assert result[0].content == (TextBlock(text="held reply"),)


def test_demo_rule_walks_a_workflow_and_reports_one_issue(server: FakeModelServer) -> None:
    first = demo_rule(request())
    names = [b.name for b in first.content if isinstance(b, ToolUseBlock)]  # type: ignore[union-attr]
    assert names == ["Read", "report_issue", "continue_workflow"]
    notes = first.content[-1].input["notes"]  # type: ignore[union-attr]
    assert len(notes) >= 50
    history = (
        Message(role="assistant", content=first.content),  # type: ignore[union-attr]
        Message(
            role="user",
            content=(ToolResultBlock(tool_use_id="x", content="ok"), TextBlock(text="step 2\n\nsteer")),
        ),
    )
    second = demo_rule(request(*history))
    names = [b.name for b in second.content if isinstance(b, ToolUseBlock)]  # type: ignore[union-attr]
    assert names == ["Read", "continue_workflow"]
    assert "steer" in second.content[0].text  # type: ignore[union-attr]


def test_fake_model_runs_as_a_process_with_control_routes() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "daemon.fakemodel", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert line.startswith("fake model listening on http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
            assert json.loads(response.read())["ok"] is True
        model = AnthropicModel("m", api_key="k", base_url=url)
        assert any(isinstance(b, ToolUseBlock) for b in model.complete(request()).content)
        assert post(f"{url}/_fake/hold", {})[1] == {"held": True}
        assert post(f"{url}/_fake/release", {})[1] == {"held": False}
        with urllib.request.urlopen(f"{url}/_fake/requests", timeout=5) as response:
            assert len(json.loads(response.read())["requests"]) == 1
    finally:
        process.terminate()
        assert process.wait(10) == 0
