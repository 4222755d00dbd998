"""A Messages API reply stream (server-sent events), read into the message it spells, in one pass.

The SDK's stream helper builds a pydantic event object per delta and re-parses the whole
partial tool input at every `input_json_delta` (O(N^2): 0.4 s of CPU for one 50 KB Write,
docs/benchmarks.md "One model call"). `ReplyReader` is fed the stream's bytes as they
arrive and keeps only what the reply needs: each `data:` line is parsed once (orjson), text
and tool input are appended to lists, and each block is joined, and a tool input parsed,
once at its `content_block_stop`. Events, in the API's order: `message_start` (the message
and its usage), `content_block_start`/`_delta`/`_stop`, `message_delta` (stop reason, usage
totals that overwrite), `message_stop`; `ping` and unknown events are skipped; an `error`
event raises `StreamError`. `message()` is the message as the SDK's `get_final_message()`
would dump it; a stream that ended before `message_stop` raises `StreamBroken`.

Semantics kept from the SDK's helper: a tool input that is not valid JSON is parsed in
jiter's partial mode (a reply cut at `max_tokens` keeps its complete fields, the same input
the helper would have built), and one that is not even a valid prefix raises ValueError.
Pure: no I/O; the adapter (daemon/agent/model.py) reads the socket and maps the errors.
"""

from __future__ import annotations

from typing import Any

import orjson

# The usage fields a message_delta's totals overwrite when present (output_tokens always is).
USAGE_TOTALS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class StreamError(Exception):
    """The API sent an `error` event inside a 200 stream (e.g. overloaded_error)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


class StreamBroken(Exception):
    """The stream ended before `message_stop`: the reply is incomplete."""


def parse_tool_input(raw: str) -> Any:
    """A tool input's JSON, parsed once; a truncated one as the SDK's helper parses it."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    from jiter import from_json  # the SDK's own parser (an SDK dependency), partial mode as it uses it

    try:
        return from_json(raw.encode(), partial_mode=True)
    except ValueError as exc:
        raise ValueError(f"Unable to parse tool parameter JSON from model: {exc}. JSON: {raw[:200]}") from exc


class ReplyReader:
    """Feed it the stream's bytes (`feed`), in chunks cut anywhere; then `message()`."""

    def __init__(self) -> None:
        self.started: dict[str, Any] | None = None  # message_start's message
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.stopped = False  # message_stop seen
        self.blocks: dict[int, dict[str, Any]] = {}
        self.parts: dict[int, list[str]] = {}  # a block's deltas until its content_block_stop
        self._tail: list[bytes] = []  # an incomplete line, in pieces
        self._data: list[bytes] = []  # the current event's data lines

    def feed(self, chunk: bytes) -> None:
        """Read every complete line of `chunk` (with what was left of the previous ones)."""
        if b"\n" not in chunk and b"\r" not in chunk:
            self._tail.append(chunk)
            return
        if self._tail:
            self._tail.append(chunk)
            chunk = b"".join(self._tail)
            self._tail.clear()
        held = b""
        if b"\r" in chunk:  # SSE allows CRLF and CR line ends; JSON never holds a raw CR
            if chunk.endswith(b"\r"):  # its LF may start the next chunk
                chunk, held = chunk[:-1], b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        rest = lines.pop() + held
        if rest:
            self._tail.append(rest)
        data = self._data
        parts = self.parts
        for line in lines:
            if line:
                if line.startswith(b"data:"):
                    data.append(line[6:] if line[5:6] == b" " else line[5:])
                continue  # `event:` (the data's own type names it), `id:`, `retry:`, comments
            if not data:
                continue
            event = orjson.loads(data[0] if len(data) == 1 else b"\n".join(data))
            data.clear()
            if event["type"] == "content_block_delta":  # the hot path: thousands per reply
                delta = event["delta"]
                kind = delta["type"]
                if kind == "text_delta":
                    parts[event["index"]].append(delta["text"])
                elif kind == "input_json_delta":
                    parts[event["index"]].append(delta["partial_json"])
                else:
                    self._other_delta(event["index"], kind, delta)
            else:
                self._event(event)

    def _other_delta(self, index: int, kind: str, delta: dict[str, Any]) -> None:
        if kind == "thinking_delta":
            self.parts[index].append(delta["thinking"])
        elif kind == "signature_delta":
            self.blocks[index]["signature"] = delta["signature"]
        # citations_delta and others: not kept (the reply drops what it does not model)

    def _event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "content_block_start":
            index = event["index"]
            self.blocks[index] = dict(event["content_block"])
            self.parts[index] = []
        elif kind == "content_block_stop":
            self._finish(event["index"])
        elif kind == "message_start":
            self.started = event["message"]
            self.usage = dict(event["message"].get("usage") or {})
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = delta.get("stop_reason")
            self.stop_sequence = delta.get("stop_sequence")
            usage = event.get("usage") or {}
            self.usage["output_tokens"] = usage.get("output_tokens")
            for name in USAGE_TOTALS:
                if usage.get(name) is not None:
                    self.usage[name] = usage[name]
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = event.get("error") or {}
            raise StreamError(str(error.get("type") or ""), str(error.get("message") or ""))
        # ping, and event types this reader does not know: nothing to keep

    def _finish(self, index: int) -> None:
        """Join a block's deltas (and parse a tool's input) once, at its end."""
        pieces = self.parts.pop(index, None)
        block = self.blocks.get(index)
        if not pieces or block is None:
            return
        joined = "".join(pieces)
        kind = block.get("type")
        if kind == "text":
            block["text"] = (block.get("text") or "") + joined
        elif kind == "thinking":
            block["thinking"] = (block.get("thinking") or "") + joined
        elif "input" in block:  # tool_use, server_tool_use
            block["input"] = parse_tool_input(joined)

    def message(self) -> dict[str, Any]:
        """The whole message; StreamBroken if the stream has not reached `message_stop`."""
        if self._tail and self._tail[-1].endswith(b"\r"):  # a last CR line end, held for its LF
            self.feed(b"\n")
        if self.started is None or not self.stopped:
            seen = "no message_start" if self.started is None else "no message_stop"
            raise StreamBroken(f"the reply stream ended early ({seen})")
        for index in list(self.parts):
            self._finish(index)
        return {
            **self.started,
            "content": [self.blocks[i] for i in sorted(self.blocks)],
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage,
        }
