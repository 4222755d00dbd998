"""A scripted Messages API for bench/model_call.py: replays fixed SSE bytes, fast, on loopback.

    .venv/bin/python bench/sse_replay.py [--tool-kb 50] [--text-deltas 1000] [--history-kb 50,200,400]

Each reply shape is built once, as the bytes the API would send (compact JSON `data:` lines,
`event:` names, `ping`), and a request picks its shape by its `model` field
(`bench-<shape>`). The body is answered in HTTP chunks of `--chunk` bytes cut anywhere, as a
network delivers it, so a reader must join events across reads; `--chunk 0` sends each
event as an HTTP chunk of its own, as the API does when it flushes every event. Every answer carries two
headers about the request it answers: `x-body-sha` (SHA-256 of the body's bytes) and
`x-value-sha` (of its JSON value, keys sorted), so the bench can check that two ways of
sending a request sent the same bytes, or at least the same JSON. Runs in a process of its
own (the bench measures its client's CPU only); prints `replay listening on <url>`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

CHUNK = 4096
TEXT_DELTA_CHARS = 10
TOOL_DELTA_CHARS = 10
USAGE = {"input_tokens": 12, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 2000}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _split(value: str, size: int) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def stream_bytes(blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]], stop_reason: str) -> bytes:
    """A whole reply: (content_block_start's block, its deltas) per block."""
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "bench",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**USAGE, "output_tokens": 1},
    }
    out = [_event("message_start", {"type": "message_start", "message": message})]
    out.append(_event("ping", {"type": "ping"}))
    for index, (block, deltas) in enumerate(blocks):
        out.append(
            _event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
        )
        out.extend(
            _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        )
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    out.append(
        _event("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 321}})
    )
    out.append(_event("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def text_block(text: str, size: int = TEXT_DELTA_CHARS) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in _split(text, size)]


def tool_block(
    name: str, tool_input: dict[str, Any], size: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    opening = {"type": "tool_use", "id": f"toolu_bench_{name}", "name": name, "input": {}}
    raw = json.dumps(tool_input)
    return opening, [{"type": "input_json_delta", "partial_json": p} for p in _split(raw, size)]


def big_file(kb: int) -> str:
    line = 'A line of the file the agent writes, with some "quotes", a tab\t and é.\n'
    return (line * (kb * 1024 // len(line) + 1))[: kb * 1024]


def shapes(tool_kb: int, text_deltas: int) -> dict[str, bytes]:
    """Every reply shape the bench asks for, by name."""
    write = {"path": "docs/big.md", "content": big_file(tool_kb)}
    small = [
        text_block("I'll read the README first."),
        tool_block("Read", {"path": "README.md"}, TOOL_DELTA_CHARS),
    ]
    text = "".join(f"word{i % 10} xx " for i in range(text_deltas))[: text_deltas * TEXT_DELTA_CHARS]
    return {
        "small": stream_bytes(small, "tool_use"),
        "tool": stream_bytes(
            [text_block("Writing it."), tool_block("Write", write, TOOL_DELTA_CHARS)], "tool_use"
        ),
        "tool-one": stream_bytes(
            [text_block("Writing it."), tool_block("Write", write, len(json.dumps(write)))], "tool_use"
        ),
        "text": stream_bytes([text_block(text)], "end_turn"),
    }


class Replay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    replies: dict[str, bytes] = {}  # shape -> the whole chunked body, framed once at start

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.loads(raw)
        shape = str(body.get("model", "")).removeprefix("bench-")
        reply = self.replies.get(shape)
        if reply is None or body.get("stream") is not True:
            self._refuse(f"no shape {shape!r}, or not a streaming request")
            return
        value = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_bench")
        self.send_header("x-body-sha", hashlib.sha256(raw).hexdigest()[:16])
        self.send_header("x-value-sha", hashlib.sha256(value).hexdigest()[:16])
        self.end_headers()
        self.wfile.write(reply)
        self.wfile.flush()

    def _refuse(self, message: str) -> None:
        data = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())


def chunked(body: bytes, size: int) -> bytes:
    """`body` in HTTP/1.1 chunked framing: chunks of `size` bytes, or (0) one per event."""
    if size > 0:
        parts = [body[i : i + size] for i in range(0, len(body), size)]
    else:
        parts = [event + b"\n\n" for event in body.split(b"\n\n")[:-1]]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tool-kb", type=int, default=50)
    parser.add_argument("--text-deltas", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=CHUNK, help="HTTP chunk bytes; 0: one chunk per event")
    args = parser.parse_args(argv)
    Replay.replies = {
        name: chunked(body, args.chunk) for name, body in shapes(args.tool_kb, args.text_deltas).items()
    }
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    httpd.daemon_threads = True
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(f"replay listening on http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    stopped.wait()
    httpd.shutdown()
    httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
