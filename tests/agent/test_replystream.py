"""The one-pass reader of a Messages API reply stream, fed recorded SSE bytes cut anywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jiter import from_json

from daemon.agent.replystream import ReplyReader, StreamBroken, StreamError

pytestmark = pytest.mark.unit


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def delta(index: int, body: dict[str, Any]) -> bytes:
    return sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": body})


def start(index: int, block: dict[str, Any]) -> bytes:
    return sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def stop(index: int) -> bytes:
    return sse("content_block_stop", {"type": "content_block_stop", "index": index})


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {
        "input_tokens": 7,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "output_tokens": 1,
    },
}
TOOL_INPUT = {
    "path": "docs/é.md",
    "content": 'line "one"\n\ttab \\ back \u2028 ✓\n' * 20,
    "n": [1, 2.5, None, True],
}


def recorded_reply(tool_json: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    """A whole reply, as the API sends it: thinking, text, a tool call whose input comes in
    7-character pieces (cutting escapes and multi-byte characters), every event type."""
    raw = json.dumps(TOOL_INPUT) if tool_json is None else tool_json
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]
    out = [sse("message_start", {"type": "message_start", "message": MESSAGE}), sse("ping", {"type": "ping"})]
    out += [
        start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
        delta(0, {"type": "thinking_delta", "thinking": "think."}),
        delta(0, {"type": "signature_delta", "signature": "sig=="}),
        stop(0),
        start(1, {"type": "text", "text": ""}),
        delta(1, {"type": "text_delta", "text": "Writing "}),
        sse("ping", {"type": "ping"}),
        delta(1, {"type": "text_delta", "text": "it ✓."}),
        delta(1, {"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "x"}}),
        stop(1),
        start(2, {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}}),
        *(delta(2, {"type": "input_json_delta", "partial_json": piece}) for piece in pieces),
        stop(2),
        start(3, {"type": "tool_use", "id": "toolu_2", "name": "Glob", "input": {}}),  # no input at all
        stop(3),
        sse("a_future_event", {"type": "a_future_event", "x": 1}),
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": usage if usage is not None else {"output_tokens": 321},
            },
        ),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(out)


def read(data: bytes, size: int | None = None) -> dict[str, Any]:
    reader = ReplyReader()
    step = size or len(data)
    for i in range(0, len(data), step):
        reader.feed(data[i : i + step])
    return reader.message()


EXPECTED_CONTENT = [
    {"type": "thinking", "thinking": "Let me think.", "signature": "sig=="},
    {"type": "text", "text": "Writing it ✓."},
    {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": TOOL_INPUT},
    {"type": "tool_use", "id": "toolu_2", "name": "Glob", "input": {}},
]


@pytest.mark.parametrize("size", [None, 1, 2, 3, 5, 64, 4096])
def test_a_whole_reply_reads_the_same_however_the_bytes_are_cut(size: int | None) -> None:
    message = read(recorded_reply(), size)
    assert message["content"] == EXPECTED_CONTENT
    assert (message["id"], message["stop_reason"], message["stop_sequence"]) == ("msg_1", "tool_use", None)
    assert message["usage"] == {
        "input_tokens": 7,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "output_tokens": 321,  # message_delta's total overwrites message_start's 1
    }


@pytest.mark.parametrize("size", [None, 1, 7])
def test_crlf_and_cr_line_ends_read_like_lf(size: int | None) -> None:
    data = recorded_reply()
    assert read(data.replace(b"\n", b"\r\n"), size)["content"] == EXPECTED_CONTENT
    assert read(data.replace(b"\n", b"\r"), size)["content"] == EXPECTED_CONTENT


def test_data_without_a_space_several_data_lines_and_comments() -> None:
    data = recorded_reply().replace(b"data: ", b"data:", 3)
    data = data.replace(
        b'data:{"type":"message_start",', b': a comment\nid: 1\ndata:{"type":"message_start",\ndata:', 1
    )
    assert read(data, 3)["content"] == EXPECTED_CONTENT


def test_usage_totals_overwrite_only_when_the_delta_has_them() -> None:
    usage = {"output_tokens": 9, "input_tokens": 8, "cache_read_input_tokens": None}
    assert read(recorded_reply(usage=usage))["usage"] == {
        "input_tokens": 8,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,  # null in the delta: message_start's value stands
        "output_tokens": 9,
    }


def test_a_truncated_tool_input_is_read_as_the_sdk_helper_reads_it() -> None:
    """Cut at max_tokens: the complete fields are kept (jiter's partial mode, as the SDK's
    helper parses it), so the tool's own validation answers with a tool error."""
    raw = '{"path": "a.md", "content": "unfinish'
    message = read(recorded_reply(tool_json=raw), 5)
    assert message["content"][2]["input"] == {"path": "a.md"} == from_json(raw.encode(), partial_mode=True)


def test_tool_json_that_is_not_even_a_prefix_is_a_parse_error() -> None:
    with pytest.raises(ValueError, match="Unable to parse tool parameter JSON"):
        read(recorded_reply(tool_json='{"path": nope}'))


def test_an_error_event_mid_stream_raises_its_type_and_message() -> None:
    data = recorded_reply()
    cut = data.index(b"event: content_block_start")
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    reader = ReplyReader()
    with pytest.raises(StreamError) as raised:
        for i in range(0, cut, 10):
            reader.feed(data[i : min(i + 10, cut)])
        reader.feed(sse("error", error))
    assert (raised.value.error_type, raised.value.message) == ("overloaded_error", "Overloaded")


@pytest.mark.parametrize("marker", [b"event: message_stop", b"event: ping", b"event: message_delta"])
def test_a_stream_that_ends_before_message_stop_is_broken(marker: bytes) -> None:
    data = recorded_reply()
    reader = ReplyReader()
    reader.feed(data[: data.index(marker)])
    with pytest.raises(StreamBroken):
        reader.message()


def test_a_reply_that_is_not_json_is_a_value_error() -> None:
    reader = ReplyReader()
    with pytest.raises(ValueError):
        reader.feed(b"event: message_start\ndata: {not json\n\n")
