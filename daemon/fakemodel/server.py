"""A scripted fake of the Anthropic Messages API, over real HTTP (tests, the demo, benchmarks).

`POST /v1/messages` answers from a `Script` (items in order, then a rule), as JSON or — when
the request says `"stream": true` — as the server-sent events the SDK parses
(message_start, content_block_start/delta/stop, message_delta, message_stop). Every request
is recorded, with its arrival time (`_at`, epoch seconds). `hold()` makes requests wait
(recorded, unanswered) until `release()` — only those a predicate picks, with
`hold(when=...)`, and after the stream has started (headers and `message_start` sent) with
`hold(after_start=True)`; `broken` counts the answers whose caller had gone away (an
abandoned call). `latency` delays every answer; `in_flight` and
`max_in_flight` count the calls being answered at once. Errors answer with the API's error
body, an `x-should-retry` header and, when scripted, `retry-after` / `retry-after-ms`, or
break a 200 stream with an `error` event (`FakeError.midstream`). `max_prompt_tokens` is a
context window: a longer request is answered 400 "prompt is too long: N tokens > M
maximum", as the real API does. Usage and the prompt cache are imitated as the API reports
them (daemon/fakemodel/usage.py): `input_tokens` is only what follows the last cache
breakpoint.

Control routes, for a server run as a process (`python -m daemon.fakemodel`):
`GET /_fake/requests`, `GET /_fake/stats` (in flight now and at most), `POST /_fake/hold`,
`POST /_fake/release` (body `{"keepHolding": true}`: only the requests waiting now go, later
ones stay held), `GET /healthz`.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel.providers import as_messages_body, event_stream_frame, route, sse_frame
from daemon.fakemodel.script import Answer, FakeError, Rule, Script, ScriptItem, fresh_id, prompt_too_long
from daemon.fakemodel.thinking import refusal, with_thinking
from daemon.fakemodel.usage import PromptCache
from daemon.turn.messages import Message, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock

log = logging.getLogger(__name__)


def parse_request(body: dict[str, Any]) -> ModelRequest:
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "".join(str(block.get("text", "")) for block in system)
    return ModelRequest(
        system=str(system),
        tools=list(body.get("tools") or []),
        messages=[Message.model_validate(m) for m in body.get("messages", [])],
        max_tokens=int(body.get("max_tokens", 0)),
    )


def _block_json(block: Any) -> dict[str, Any]:
    data: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return data


def message_json(reply: ModelReply, model: str, message_id: str, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [_block_json(block) for block in reply.content],
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _chunks(value: str, size: int = 24) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def sse_events(
    reply: ModelReply, model: str, message_id: str, usage: dict[str, int]
) -> list[tuple[str, dict[str, Any]]]:
    """The stream the API sends for `reply`, as (event name, data) pairs."""
    start = message_json(reply, model, message_id, {**usage, "output_tokens": 1})
    start.update(content=[], stop_reason=None)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    events.append(("ping", {"type": "ping"}))
    for index, block in enumerate(reply.content):
        if isinstance(block, TextBlock):
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": part} for part in _chunks(block.text)]
        elif isinstance(block, ToolUseBlock):
            opening = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _chunks(json.dumps(block.input))
            ]
        elif isinstance(block, ThinkingBlock):
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block.thinking}]
            deltas.append({"type": "signature_delta", "signature": block.signature})
        elif isinstance(block, RedactedThinkingBlock):
            opening, deltas = {"type": "redacted_thinking", "data": block.data}, []
        else:
            continue
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": reply.stop_reason, "stop_sequence": None, "stop_details": None, "container": None}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def midstream_error(error: FakeError, model: str) -> list[tuple[str, dict[str, Any]]]:
    """A stream that starts like a reply and breaks with an `error` event (SSE)."""
    start = message_json(
        ModelReply(content=()), model, fresh_id("msg_"), {"input_tokens": 1, "output_tokens": 1}
    )
    start.update(stop_reason=None)
    payload = {"type": "error", "error": {"type": error.type, "message": error.message}}
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
        ("error", payload),
    ]


class FakeModelServer:
    """The fake API on 127.0.0.1; `start()` returns its base URL (for ANTHROPIC_BASE_URL)."""

    def __init__(
        self,
        items: list[ScriptItem] | None = None,
        rule: Rule | None = None,
        latency: float = 0.0,
        port: int = 0,
        host: str = "127.0.0.1",
        max_prompt_tokens: int | None = None,
    ) -> None:
        self.script = Script(items or [], rule)
        self.latency = latency
        self.max_prompt_tokens = max_prompt_tokens
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._arrived = threading.Condition()
        self._gate = threading.Event()
        self._gate.set()
        self._hold_when: Callable[[dict[str, Any]], bool] | None = None
        self._hold_after_start = False
        self.broken = 0  # answers cut short because the caller had closed the connection
        # called with each /v1/messages request as it arrives (its body plus `_headers`, `_at`,
        # `_peer`), before it is recorded and answered; what it adds to the dict is recorded
        self.on_arrival: Callable[[dict[str, Any]], None] | None = None
        self.cache = PromptCache()
        # every reply answered, with the request it answered (ground truth for the fault
        # tests: the tool ids minted for it, which no later request may leave unanswered)
        self.replies: list[tuple[dict[str, Any], ModelReply]] = []
        self._httpd = _Httpd((host, port), self)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> str:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-model", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._gate.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def hold(self, when: Callable[[dict[str, Any]], bool] | None = None, after_start: bool = False) -> None:
        """Requests from now on (those `when(body)` picks, if given) are recorded and wait,
        unanswered — or, `after_start`, with the stream begun — until `release()`."""
        self._hold_when = when
        self._hold_after_start = after_start
        self._gate.clear()

    def holds(self, body: dict[str, Any], after_start: bool) -> bool:
        """Whether this request waits at this point (decided as it gets there)."""
        if self._gate.is_set() or after_start != self._hold_after_start:
            return False
        return self._hold_when is None or self._hold_when(body)

    def release(self, keep_holding: bool = False) -> None:
        """Let the held requests go; with `keep_holding`, only those waiting now: a request
        that arrives after this call waits for the next release (the gate is replaced before
        the old one opens, so none slips through between a release and a new hold)."""
        gate = self._gate
        if keep_holding and not gate.is_set():
            self._gate = threading.Event()
        gate.set()

    def wait_released(self) -> None:
        self._gate.wait()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Block until at least `count` requests arrived (held ones included)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"{len(self.requests)} request(s) arrived, expected {count}")
            return list(self.requests)

    # --- called from the handler threads ---

    def record(self, body: dict[str, Any]) -> None:
        with self._arrived:
            self.requests.append(body)
            self._arrived.notify_all()

    def stats(self) -> dict[str, int]:
        with self._arrived:
            return {
                "requests": len(self.requests),
                "inFlight": self.in_flight,
                "maxInFlight": self.max_in_flight,
            }

    def call_started(self) -> None:
        with self._arrived:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def call_ended(self) -> None:
        with self._arrived:
            self.in_flight -= 1

    def answer(self, body: dict[str, Any]) -> tuple[Answer, dict[str, int], str]:
        if self.holds(body, after_start=False):
            self.wait_released()
        if self.latency:
            time.sleep(self.latency)
        prompt = self.cache.usage(body)
        if self.max_prompt_tokens is not None and prompt.total > self.max_prompt_tokens:
            return prompt_too_long(prompt.total, self.max_prompt_tokens), {}, ""
        if (refused := refusal(body)) is not None:  # as the API checks thinking blocks
            return FakeError(400, "invalid_request_error", refused), {}, ""
        answer = self.script.answer(parse_request(body))
        if isinstance(answer, ModelReply):
            answer = with_thinking(answer, body)
        usage = {
            "input_tokens": prompt.input_tokens,
            "output_tokens": answer.usage.output_tokens if isinstance(answer, ModelReply) else 0,
            "cache_read_input_tokens": prompt.cache_read,
            "cache_creation_input_tokens": prompt.cache_write,
        }
        if isinstance(answer, ModelReply):
            self.replies.append((body, answer))
        return answer, usage, fresh_id("msg_")


def _asks_keep_holding(raw: bytes) -> bool:
    """A release's body `{"keepHolding": true}`; anything else (none, `{}`) is a plain release."""
    try:
        asked = json.loads(raw) if raw else {}
    except ValueError:
        return False
    return isinstance(asked, dict) and asked.get("keepHolding") is True


class _Httpd(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], fake: FakeModelServer) -> None:
        super().__init__(address, _Handler)
        self.fake = fake

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A caller that went away mid-answer (a worker killed by a crash test) is routine.
        if isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            log.debug("fake model: client %s went away", client_address)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A stream is many small writes: with Nagle on, each one after the first waits for the
    # client's delayed ACK (~40 ms a request on Linux), which the real API does not add.
    disable_nagle_algorithm = True
    server: _Httpd

    @property
    def fake(self) -> FakeModelServer:
        return self.server.fake

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fake model: " + format, *args)

    def do_GET(self) -> None:
        if self.path == "/_fake/requests":
            self._json(200, {"requests": list(self.fake.requests)})
        elif self.path == "/_fake/stats":
            self._json(200, self.fake.stats())
        elif self.path in ("/_fake/health", "/healthz"):
            self._json(200, {"ok": True, "requests": len(self.fake.requests)})
        else:
            self._error(404, "not_found_error", f"no route GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path == "/_fake/hold":
            self.fake.hold()
            self._json(200, {"held": True})
        elif self.path == "/_fake/release":
            keep = _asks_keep_holding(raw)
            self.fake.release(keep_holding=keep)
            self._json(200, {"held": keep})
        elif self.path.split("?")[0] == "/v1/messages":
            self._messages(raw)
        elif (routed := route(self.path)) is not None:  # Bedrock's or Vertex's form
            if routed[0] == "bedrock":
                self.encode_event = event_stream_frame
            self._messages(as_messages_body(raw, *routed, self.path))
        else:
            self._error(404, "not_found_error", f"no route POST {self.path}")

    def _messages(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
            parse_request(body)
        except (ValueError, TypeError) as exc:
            self._error(400, "invalid_request_error", f"bad request body: {exc}")
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        arrived = {**body, "_headers": headers, "_at": time.time(), "_peer": list(self.client_address[:2])}
        if self.fake.on_arrival is not None:  # fault tests: who sent it, and who owns the session now
            self.fake.on_arrival(arrived)
        self.fake.record(arrived)
        self.fake.call_started()
        self._in_call = True
        try:
            self._answer(body)
        finally:
            self._end_call()

    def _end_call(self) -> None:
        """The call is no longer in flight: called just before the answer's last bytes go out,
        since the caller may start its next call the moment it has them."""
        if getattr(self, "_in_call", False):
            self._in_call = False
            self.fake.call_ended()

    def _answer(self, body: dict[str, Any]) -> None:
        try:
            answer, usage, message_id = self.fake.answer(body)
        except AssertionError as exc:  # the script is exhausted: a test bug, said loudly
            self._error(500, "api_error", str(exc), retry=False)
            return
        model = str(body.get("model"))
        if isinstance(answer, FakeError) and answer.midstream and body.get("stream"):
            self._stream(midstream_error(answer, model))
        elif isinstance(answer, FakeError):
            self._fake_error(answer)
        elif body.get("stream"):
            held = self.fake.holds(body, after_start=True)
            try:
                self._stream(sse_events(answer, model, message_id, usage), held)
            except (BrokenPipeError, ConnectionResetError):
                self.fake.broken += 1
                self.close_connection = True
        else:
            self._json(200, message_json(answer, model, message_id, usage))

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_fake")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self._end_call()
        self.wfile.write(data)

    def _error(
        self, status: int, kind: str, message: str, retry: bool = False, headers: dict[str, str] | None = None
    ) -> None:
        payload = {"type": "error", "error": {"type": kind, "message": message}}
        self._json(status, payload, {"x-should-retry": "true" if retry else "false", **(headers or {})})

    def _fake_error(self, error: FakeError) -> None:
        headers = {}
        if error.retry_after is not None:
            headers["retry-after"] = f"{error.retry_after:g}"
        if error.retry_after_ms is not None:
            headers["retry-after-ms"] = f"{error.retry_after_ms:g}"
        self._error(error.status, error.type, error.message, retry=error.retry, headers=headers)

    def _stream(self, events: list[tuple[str, dict[str, Any]]], hold: bool = False) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_fake")
        self.end_headers()
        for index, (name, data) in enumerate(events):
            chunk = getattr(self, "encode_event", sse_frame)(name, data)
            if index == len(events) - 1:
                self._end_call()  # the last event may be all the caller waits for
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            if hold and index == 0:  # the stream has begun: the caller is reading it now
                self.wfile.flush()
                self.fake.wait_released()
        self._end_call()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def serve_until_signalled(server: FakeModelServer) -> int:
    """Start, print the ready line, serve until SIGINT/SIGTERM, stop (also bench/fakeloop.py)."""
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.start()
    print(f"fake model listening on {server.url}", flush=True)
    stopped.wait()
    server.stop()
    return 0
