"""The adapter's own ways on the wire: the SDK's request bytes, and replies the fake cannot send.

`AnthropicModel` posts pre-serialized bytes through the SDK client and reads the stream
itself (daemon/agent/replystream.py); these pin that the bytes are the SDK's own and that
broken or malformed replies still end as the retry policy expects.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import pytest

from daemon.agent.model import (
    AnthropicModel,
    ModelApiError,
    ModelError,
    ModelRequest,
    http_module,
    make_client,
    quiet_http_logs,
    request_bytes,
    wire_request,
)
from daemon.agent.retrypolicy import Verdict, classify
from daemon.fakemodel import FakeModelServer, reply, text, tool
from daemon.tools import default_toolbox
from daemon.turn.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from tests.tiers import fixture_tier

pytestmark = pytest.mark.redis


def request() -> ModelRequest:
    history = [
        Message(role="user", content=(TextBlock(text='Start. é ✓ \u2028 "quoted" \\ back'),)),
        Message(
            role="assistant", content=(ToolUseBlock(id="t1", name="Read", input={"path": "a", "n": 1.5}),)
        ),
        Message(role="user", content=(ToolResultBlock(tool_use_id="t1", content="A\tB\x01"),)),
    ]
    return ModelRequest("You are a test.", default_toolbox().specs(), history, max_tokens=100)


def test_the_request_is_the_bytes_the_sdk_would_send() -> None:
    with FakeModelServer() as server:
        server.script.extend([reply(text("a")), reply(text("b"))])
        client = make_client("test-key", server.url)
        sent: list[tuple[bytes, dict[str, str]]] = []

        def record(http_request: Any) -> None:
            sent.append((http_request.content, dict(http_request.headers)))

        client._client.event_hooks["request"].append(record)
        AnthropicModel("claude-test", client=client).complete(request())
        with client.messages.stream(**wire_request(request(), "claude-test")) as stream:
            stream.get_final_message()
    (ours, our_headers), (sdks, sdk_headers) = sent
    assert ours == sdks and json.loads(ours)["stream"] is True
    for name in ("x-api-key", "anthropic-version", "content-type", "user-agent"):
        assert our_headers.get(name) == sdk_headers.get(name), name


def test_a_growing_history_sent_from_its_kept_bytes_is_still_the_sdks_body() -> None:
    model = AnthropicModel("claude-test", api_key="k", base_url="http://127.0.0.1:9")
    first = request()
    turn2 = ModelRequest(
        first.system,
        first.tools,
        [
            *first.messages,
            Message(
                role="assistant",
                content=(ToolUseBlock(id="t2", name="Read", input={"big": 2**70, "path": "b"}),),
            ),
        ],
    )
    turn3 = ModelRequest(
        first.system,
        first.tools,
        [*turn2.messages, Message(role="user", content=(ToolResultBlock(tool_use_id="t2", content="B"),))],
    )
    for turn in (first, turn2, turn3, turn3):
        body = wire_request(turn, "claude-test", model.wire_cache)
        sent = request_bytes(body, model.wire_cache)
        assert sent == sdk_bytes(wire_request(turn, "claude-test"))
    assert len(model.wire_cache._sent) == 4  # the five messages but the tail, each serialized once


def sdk_bytes(body: dict[str, Any]) -> bytes:
    """What the SDK sends for `messages.stream(**body)` (its request builder, no network)."""
    client = make_client("k", "http://127.0.0.1:9")
    seen: list[bytes] = []

    def record(http_request: Any) -> None:
        seen.append(http_request.content)
        raise RuntimeError("recorded")

    client._client.event_hooks["request"].append(record)
    with pytest.raises(anthropic.APIConnectionError), client.messages.stream(**body) as stream:
        stream.get_final_message()
    return seen[0]


def test_a_long_tool_input_in_many_deltas_arrives_whole() -> None:
    content = "".join(f'line {i}: é "q" \\ ✓\n' for i in range(3000))
    with FakeModelServer() as server:
        server.script.extend([reply(tool("Write", tool_id="toolu_w", path="big.md", content=content))])
        answer = AnthropicModel("m", api_key="k", base_url=server.url).complete(request())
    [use] = answer.content
    assert isinstance(use, ToolUseBlock) and use.id.startswith("toolu_")  # minted fresh by the fake
    assert (use.name, use.input) == ("Write", {"path": "big.md", "content": content})


class Replay(BaseHTTPRequestHandler):
    """Answers every POST with `body` as a 200 event stream."""

    protocol_version = "HTTP/1.1"
    body = b""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(self.body)))
        self.send_header("retry-after", "2")
        self.end_headers()
        self.wfile.write(self.body)


@pytest.fixture
@fixture_tier("redis")
def replay() -> Iterator[tuple[str, type[Replay]]]:
    handler = type("ReplayOnce", (Replay,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


START = {
    "type": "message_start",
    "message": {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "content": [],
        "usage": {"input_tokens": 1},
    },
}
TOOL_START = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}},
}


def tool_reply(partial_json: str) -> bytes:
    return sse(
        START,
        TOOL_START,
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": partial_json},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    )


def test_tool_json_that_does_not_parse_is_a_model_error_as_before(replay: tuple[str, type[Replay]]) -> None:
    url, handler = replay
    handler.body = tool_reply('{"path": nope}')
    with pytest.raises(ModelError, match="could not be parsed") as raised:
        AnthropicModel("m", api_key="k", base_url=url).complete(request())
    assert not isinstance(raised.value, ModelApiError)  # not retried: the same reply would come again


def test_a_tool_input_cut_at_max_tokens_keeps_its_complete_fields(replay: tuple[str, type[Replay]]) -> None:
    url, handler = replay
    handler.body = tool_reply('{"path": "a.md", "content": "unfini')
    answer = AnthropicModel("m", api_key="k", base_url=url).complete(request())
    assert answer.content == (ToolUseBlock(id="toolu_1", name="Write", input={"path": "a.md"}),)
    assert (answer.stop_reason, answer.usage.output_tokens) == ("tool_use", 5)


def test_a_stream_that_stops_before_message_stop_is_a_retryable_connection_failure(
    replay: tuple[str, type[Replay]],
) -> None:
    url, handler = replay
    handler.body = sse(START, TOOL_START)
    with pytest.raises(ModelApiError) as raised:
        AnthropicModel("m", api_key="k", base_url=url).complete(request())
    failure = raised.value.failure
    assert (failure.status, failure.error_type) == (None, "connection") and "message_stop" in failure.message
    assert classify(failure) is Verdict.RETRY


def test_an_error_event_keeps_the_answers_retry_after(replay: tuple[str, type[Replay]]) -> None:
    url, handler = replay
    handler.body = sse(START, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}})
    with pytest.raises(ModelApiError) as raised:
        AnthropicModel("m", api_key="k", base_url=url).complete(request())
    assert raised.value.failure == raised.value.failure.__class__(429, "rate_limit_error", "slow", 2.0)


def test_a_quieted_worker_logs_no_line_per_model_call(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger(http_module().__name__)
    level = logger.level
    try:
        with FakeModelServer() as server, caplog.at_level(logging.INFO):
            server.script.extend([reply(text("a")), reply(text("b"))])
            model = AnthropicModel("m", api_key="k", base_url=server.url)
            model.complete(request())
            assert any("HTTP Request" in record.getMessage() for record in caplog.records)
            caplog.clear()
            quiet_http_logs()  # as worker/pool.py does
            model.complete(request())
            assert not any("HTTP Request" in record.getMessage() for record in caplog.records)
    finally:
        logger.setLevel(level)
