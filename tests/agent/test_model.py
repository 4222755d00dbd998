"""The Anthropic adapter against the project's fake Messages API, over real HTTP.

The real `anthropic` SDK does the talking (streaming), so these tests also pin the fake's
wire format to what the installed SDK parses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from daemon.agent.model import (
    AnthropicModel,
    ModelApiError,
    ModelRequest,
    ModelStalled,
    RealApiForbidden,
    forbid_real_api,
    make_client,
    wire_request,
)
from daemon.agent.retrypolicy import Failure, Verdict, classify
from daemon.fakemodel import FakeError, FakeModelServer, demo_rule, overloaded, reply, text, tool, weather
from daemon.fakemodel.usage import FRAMING_TOKENS
from daemon.tools import default_toolbox
from daemon.turn.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from tests.tiers import fixture_tier

pytestmark = pytest.mark.unit


@pytest.fixture
@fixture_tier("redis")
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
    [said, use] = answer.content
    assert said == TextBlock(text="Writing it.")
    assert isinstance(use, ToolUseBlock) and use.id.startswith("toolu_") and use.id != "toolu_1"  # fresh
    assert (use.name, use.input) == ("Write", big_input)
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


def failure_of(server: FakeModelServer, **kwargs: Any) -> ModelApiError:
    with pytest.raises(ModelApiError) as raised:
        model_for(server, **kwargs).complete(request())
    return raised.value


def test_an_error_answer_is_one_call_and_says_what_the_retry_policy_needs(server: FakeModelServer) -> None:
    server.script.extend([overloaded(retry_after=3)])
    error = failure_of(server)
    assert len(server.requests) == 1  # the SDK's own retries are off: the worker retries
    assert error.failure == Failure(529, "overloaded_error", "Overloaded", 3.0)
    assert "529: overloaded_error: Overloaded" in str(error)


def test_retry_after_ms_wins_over_retry_after(server: FakeModelServer) -> None:
    server.script.extend(
        [FakeError(429, "rate_limit_error", "slow down", retry_after=9, retry_after_ms=1500)]
    )
    assert failure_of(server).failure.retry_after == 1.5


def test_an_overload_inside_the_stream_is_a_retryable_529(server: FakeModelServer) -> None:
    server.script.extend([overloaded(midstream=True)])
    failure = failure_of(server).failure
    assert (failure.status, failure.error_type, failure.retry_after) == (529, "overloaded_error", None)
    assert classify(failure) is Verdict.RETRY


def test_prompt_too_long_is_the_real_apis_400(server: FakeModelServer) -> None:
    server.max_prompt_tokens = 100
    failure = failure_of(server).failure
    assert failure.status == 400 and failure.error_type == "invalid_request_error"
    assert re.fullmatch(r"prompt is too long: \d+ tokens > 100 maximum", failure.message)
    assert classify(failure) is Verdict.PROMPT_TOO_LONG
    assert server.script.rule is None  # answered before the script was asked


def test_silence_longer_than_the_stall_limit_is_a_stall(server: FakeModelServer) -> None:
    server.latency = 1.5
    server.script.extend([reply(text("late"))])
    with pytest.raises(ModelStalled) as stalled:
        model_for(server, stall_seconds=0.3).complete(request())
    assert stalled.value.failure.timed_out and classify(stalled.value.failure) is Verdict.RETRY


@pytest.mark.redis
def test_unreachable_api_is_a_retryable_failure_without_a_status() -> None:
    model = AnthropicModel("m", api_key="k", base_url="http://127.0.0.1:9")
    with pytest.raises(ModelApiError) as raised:
        model.complete(request())
    assert (raised.value.failure.status, raised.value.failure.error_type) == (None, "connection")
    assert "unreachable" in str(raised.value)


def test_models_share_one_client_and_keep_their_own_stall_limits(server: FakeModelServer) -> None:
    client = make_client("test-key", server.url)
    quick, patient = (AnthropicModel("m", stall_seconds=s, client=client) for s in (0.3, 5.0))
    assert quick.client is patient.client and client.max_retries == 0
    server.latency = 0.8
    server.script.extend([reply(text("late")), reply(text("late"))])
    with pytest.raises(ModelStalled):
        quick.complete(request())
    assert patient.complete(request()).content == (TextBlock(text="late"),)


def test_usage_is_reported_as_the_api_does_with_prompt_caching(server: FakeModelServer) -> None:
    """With a breakpoint on the last block, input_tokens is only what follows it and the
    request's framing (a handful, never 0: issue 45): the request's size is input + cache
    read + cache write."""
    server.script.extend([reply(text("one")), reply(text("two"))])
    model = model_for(server)
    first = request()
    one = model.complete(first).usage
    grown = request(
        Message(role="assistant", content=(TextBlock(text="one"),)),
        Message(role="user", content=(TextBlock(text="more " * 50),)),
    )
    two = model.complete(grown).usage
    assert one.cache_read_tokens == 0 and one.cache_write_tokens > 0 and one.input_tokens == FRAMING_TOKENS
    assert two.cache_read_tokens >= one.cache_write_tokens  # the first request's prompt, cached
    assert two.prompt_tokens > one.prompt_tokens > 500 and two.input_tokens == FRAMING_TOKENS


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


def test_a_release_that_keeps_holding_lets_only_the_waiting_calls_go(server: FakeModelServer) -> None:
    """POST /_fake/release {"keepHolding": true}: the call waiting now is answered, the next
    one waits (no window between a release and a new hold), until a plain release."""
    import threading

    server.script.extend([reply(text("first")), reply(text("second"))])
    server.hold()
    result: list[Any] = []

    def call() -> threading.Thread:
        thread = threading.Thread(target=lambda: result.append(model_for(server).complete(request())))
        thread.start()
        return thread

    first = call()
    server.wait_for_requests(1)
    assert post(f"{server.url}/_fake/release", {"keepHolding": True})[:2] == (200, {"held": True})
    first.join(10)
    assert [r.content for r in result] == [(TextBlock(text="first"),)]
    second = call()
    server.wait_for_requests(2)
    second.join(0.3)
    assert second.is_alive() and len(result) == 1  # recorded, held
    assert post(f"{server.url}/_fake/release", {})[:2] == (200, {"held": False})
    second.join(10)
    assert result[1].content == (TextBlock(text="second"),)


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
            content=(
                ToolResultBlock(
                    tool_use_id="x",
                    content=json.dumps({"status": "advanced", "step": {"prompt": "Step 2.\n\nDo it."}}),
                ),
                TextBlock(text="Step 2.\n\nDo it.\n\nAlso read the tests."),
            ),
        ),
    )
    second = demo_rule(request(*history))
    names = [b.name for b in second.content if isinstance(b, ToolUseBlock)]  # type: ignore[union-attr]
    assert names == ["Read", "continue_workflow"]
    said = second.content[0].text  # type: ignore[union-attr]
    print(said)
    # issue 45: the steer is quoted back (the step's prompt is not), so a newcomer sees it arrived
    assert 'You said: "Also read the tests."' in said and "Do it" not in said


@pytest.mark.processes
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


def test_weather_specs_for_the_fake_models_command_line() -> None:
    errors = weather("529, 429:3, 503:0.5, stream-overload, 400")
    assert [(e.status, e.type, e.retry_after, e.midstream) for e in errors] == [
        (529, "overloaded_error", None, False),
        (429, "rate_limit_error", 3.0, False),
        (503, "api_error", 0.5, False),
        (529, "overloaded_error", None, True),
        (400, "invalid_request_error", None, False),
    ]
