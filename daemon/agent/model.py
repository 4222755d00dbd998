"""The model the agent talks to: a small protocol, and its Anthropic Messages API adapter.

The loop sees only `Model.complete(request) -> ModelReply`; tests pass a scripted model.
`AnthropicModel` uses the official SDK's client (its auth, headers, errors and HTTP pool;
streaming, so a long reply never hits the non-streaming timeout; the one streaming call is
`AnthropicModel._stream`). How the call is made is ours, for its CPU (docs/benchmarks.md,
"One model call"): the body is serialized once with orjson into the bytes the SDK would
send (`request_bytes`) and posted through the client's own `post`, and the reply stream is
read in one pass by daemon/agent/replystream.py instead of the SDK's stream helper, which
re-parses a tool's whole partial input at every delta. It marks the
system prompt and the last tool with `cache_control` (plus the last message block, so each
turn reuses the previous turn's cached prefix), and turns every failure into a
`ModelApiError` carrying what the retry policy needs (daemon/agent/retrypolicy.py): the SDK's
own retries are off, because the worker retries for minutes where the SDK would give up
after seconds (daemon/agent/modelcall.py). A silence longer than the stall limit is
`ModelStalled`. The SDK client is built once (`make_client`) and may be shared by every
session of a process: its connection pool is thread-safe, and each call passes its own
timeout. Given the turn's `TurnInterrupt`, the call runs so that an interrupt steer
abandons it at once (daemon/turn/interrupt.py): its stream is cut and its reply never read.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol
from urllib.parse import urlparse

import orjson

from daemon.agent.providers import provider_client, stream_message, uses_raw_path
from daemon.agent.replystream import ReplyReader, StreamBroken, StreamError
from daemon.agent.retrypolicy import Failure, effective_status, retry_after_seconds
from daemon.agent.sendguard import check_send
from daemon.turn.interrupt import CallHandle, TurnInterrupt
from daemon.turn.messages import ContentBlock, Message

DEFAULT_MAX_TOKENS = 8192
REAL_API_HOST = "api.anthropic.com"
FORBID_REAL_API_ENV = "WORKTRAIN_FORBID_REAL_API"
CACHE_CONTROL = {"type": "ephemeral"}


@dataclass(frozen=True)
class ModelRequest:
    system: str
    tools: Sequence[dict[str, Any]]
    messages: Sequence[Message]
    max_tokens: int | None = None  # None: the session's own (AnthropicModel.max_tokens)
    # False for a call that must not think (the compactor's summary: its own small budget)
    allow_thinking: bool = True


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """The whole request's size: what was read from the cache and written to it count too."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def fields(self) -> dict[str, str | int]:
        """The session record's running sums (docs/DEVELOPING.md Usage)."""
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cacheReadTokens": self.cache_read_tokens,
            "cacheWriteTokens": self.cache_write_tokens,
        }


@dataclass(frozen=True)
class ModelReply:
    content: tuple[ContentBlock, ...]
    stop_reason: str | None = "end_turn"
    usage: Usage = field(default_factory=Usage)
    model: str | None = None  # the model that answered, as the API names it

    def message(self) -> Message:
        return Message(role="assistant", content=self.content)


class Model(Protocol):
    def complete(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply:
        """The reply; with `interrupt`, raises daemon.turn.interrupt.Interrupted as soon as the
        live turn is interrupted (the call abandoned, nothing of it kept)."""
        ...


class ModelError(Exception):
    """The model call failed in a way no retry mends (a reply that does not parse)."""


class ModelApiError(ModelError):
    """The API answered with an error, or did not answer: `failure` says which, for the
    retry policy (daemon/agent/retrypolicy.py) to decide whether to call again."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class ModelStalled(ModelApiError):
    """The API sent nothing for the stall limit (a timeout): retried like any other failure;
    if the retries run out, the outcome is `stalled`."""

    def __init__(self, message: str) -> None:
        super().__init__(Failure(None, "timeout", message))


class RealApiForbidden(RuntimeError):
    """A test (WORKTRAIN_FORBID_REAL_API=1) was about to call the real Anthropic API."""


def forbid_real_api(base_url: str | None) -> None:
    """Fail loudly when the real API would be called while the test guard is on."""
    if os.environ.get(FORBID_REAL_API_ENV, "") not in ("1", "true", "yes"):
        return
    host = urlparse(base_url).hostname if base_url else REAL_API_HOST
    if host is None or host == REAL_API_HOST or host.endswith(".anthropic.com"):
        raise RealApiForbidden(
            f"{FORBID_REAL_API_ENV} is set and the model base URL is {base_url or 'the default'}: "
            "tests must use the fake model (daemon.fakemodel), never the real Anthropic API"
        )


class WireCache:
    """The wire form of each history message, kept from one request to the next.

    The history only grows between turns, so each message is dumped once per session
    instead of once per turn: dumping the whole history every turn was the largest daemon
    cost per turn late in a long session (docs/benchmarks.md, "Per-turn overhead"). Keyed by
    identity; a message no longer in the request is forgotten. The cached dicts are shared
    with the bodies built from them, so nothing may mutate them (`wire_request` copies the
    one message it changes). Each one's JSON bytes are kept too, once it has been sent
    (`as_sent`): a request's body is then serialized only in its new messages.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Message, dict[str, Any]]] = {}
        self._wires: dict[int, dict[str, Any]] = {}  # id -> a cached wire dict of this request
        self._sent: dict[int, tuple[dict[str, Any], orjson.Fragment]] = {}  # id(wire) -> its bytes

    def wire(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        kept: dict[int, tuple[Message, dict[str, Any]]] = {}
        wires: dict[int, dict[str, Any]] = {}
        out = []
        for message in messages:
            entry = self._entries.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, message.wire())
            kept[id(message)] = entry
            wires[id(entry[1])] = entry[1]
            out.append(entry[1])
        self._entries = kept
        self._wires = wires
        self._sent = {key: sent for key, sent in self._sent.items() if wires.get(key) is sent[0]}
        return out

    def as_sent(self, wire: dict[str, Any]) -> dict[str, Any] | orjson.Fragment:
        """A message of the last `wire()` as its JSON bytes (serialized once); any other
        dict (the tail, which carries the request's cache breakpoint) as it is."""
        if self._wires.get(id(wire)) is not wire:
            return wire
        sent = self._sent.get(id(wire))
        if sent is None or sent[0] is not wire:
            sent = (wire, orjson.Fragment(encode_json(wire)))
            self._sent[id(wire)] = sent
        return sent[1]


def wire_request(
    request: ModelRequest,
    model: str,
    cache: WireCache | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    thinking_budget: int = 0,
) -> dict[str, Any]:
    """The Messages API body for `request`, with cache_control on tools, system and the tail;
    `max_tokens` when the request sets none, `thinking` when the session has a budget (the
    history's thinking blocks go back as they came: Message.wire keeps them verbatim)."""
    tools = [dict(tool) for tool in request.tools]
    if tools:
        tools[-1]["cache_control"] = CACHE_CONTROL
    if cache is None:
        messages = [message.wire() for message in request.messages]
    else:
        messages = cache.wire(request.messages)
    if messages and messages[-1]["content"]:
        last = messages[-1]
        last_block = {**last["content"][-1], "cache_control": CACHE_CONTROL}
        messages[-1] = {**last, "content": [*last["content"][:-1], last_block]}
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens if request.max_tokens is not None else max_tokens,
        "system": [{"type": "text", "text": request.system, "cache_control": CACHE_CONTROL}],
        "tools": tools,
        "messages": messages,
    }
    if thinking_budget > 0 and request.allow_thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    return body


def reply_from_sdk(message: Any) -> ModelReply:
    """An SDK `Message` (or its dict form) as a ModelReply; unknown block types are dropped."""
    data = message if isinstance(message, dict) else message.model_dump(mode="json")
    known = {"text", "tool_use", "thinking", "redacted_thinking"}
    blocks = tuple(
        Message.model_validate(
            {"role": "assistant", "content": [b for b in data.get("content", []) if b.get("type") in known]}
        ).content
    )
    usage = data.get("usage") or {}
    return ModelReply(
        content=blocks,
        stop_reason=data.get("stop_reason"),
        model=data.get("model"),
        usage=Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
            cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
        ),
    )


CONNECT_TIMEOUT_SECONDS = 10.0


def make_client(api_key: str | None = None, base_url: str | None = None, provider: str = "anthropic") -> Any:
    """The SDK client: built once per process and shared (its HTTP pool is thread-safe);
    `provider` picks Anthropic, AnthropicBedrock or AnthropicVertex (daemon/agent/providers.py).

    `max_retries=0`: the worker retries (daemon/agent/modelcall.py); SDK retries would hide the
    weather from it and spend the budget without a `model_retry` event."""
    import anthropic  # heavy: imported where the model is built, not by every command

    base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
    if provider == "anthropic":
        forbid_real_api(base_url)
    # the fence's last check before a request's bytes leave (daemon/agent/sendguard.py)
    http_client = anthropic.DefaultHttpxClient(event_hooks={"request": [check_send]})
    return provider_client(provider, api_key, base_url, http_client)


class AnthropicModel:
    """The real model, through the `anthropic` SDK (ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL)."""

    sends_through_gate = True  # its client (make_client) checks the send gate (sendguard.py)

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        stall_seconds: float = 120.0,
        client: Any = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_budget: int = 0,
    ) -> None:
        import anthropic

        self.model = model
        self.max_tokens = max_tokens  # the session's agentConfig (docs/DEVELOPING.md)
        self.thinking_budget = thinking_budget
        self.wire_cache = WireCache()
        self.client = client if client is not None else make_client(api_key, base_url)
        # read: the longest silence tolerated from a streaming reply (the stall limit)
        self.timeout = anthropic.Timeout(
            connect=CONNECT_TIMEOUT_SECONDS, read=stall_seconds, write=60.0, pool=60.0
        )

    def complete(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply:
        body = wire_request(request, self.model, self.wire_cache, self.max_tokens, self.thinking_budget)
        if not uses_raw_path(self.client):  # Bedrock, Vertex: through the SDK's own stream
            if interrupt is None:
                return reply_from_sdk(self._provider_stream(body))
            return reply_from_sdk(interrupt.abandonable(lambda handle: self._provider_stream(body, handle)))
        content = request_bytes(body, self.wire_cache)
        if interrupt is None:
            return reply_from_sdk(self._stream(content))
        return reply_from_sdk(interrupt.abandonable(lambda handle: self._stream(content, handle)))

    def _provider_stream(self, body: dict[str, Any], handle: CallHandle | None = None) -> dict[str, Any]:
        """The call through a provider's SDK client (daemon/agent/providers.py), its failures
        mapped like the raw path's."""

        def opened(response: Any) -> None:
            if handle is not None:
                handle.opened(lambda: cut_response(response))

        with self._api_errors():
            return stream_message(self.client, body, self.timeout, opened)
        raise AssertionError("unreachable")  # _api_errors re-raises every failure

    def _stream(self, content: bytes, handle: CallHandle | None = None) -> dict[str, Any]:
        """The one streaming call to the API, through the SDK client (its auth, headers,
        errors and HTTP pool), with the body already serialized and the stream read by
        `ReplyReader`; every way it fails becomes a ModelError. With a `handle`, an interrupt
        can cut the stream from another thread (`cut_response`)."""
        with self._api_errors():
            response = self.client.post(
                "/v1/messages",
                cast_to=http_module().Response,  # the raw response, its body not yet read
                content=content,
                options={"timeout": self.timeout},
                stream=True,
            )
            with contextlib.closing(response):
                if handle is not None:
                    handle.opened(lambda: cut_response(response))
                return read_reply(response)
        raise AssertionError("unreachable")  # _api_errors re-raises every failure

    @contextlib.contextmanager
    def _api_errors(self) -> Iterator[None]:
        """Every way a call fails, as a ModelError the retry policy reads."""
        import anthropic

        try:
            yield
        except anthropic.APITimeoutError as exc:
            raise ModelStalled(f"the model API sent nothing for {self.timeout.read:.0f}s: {exc}") from exc
        except anthropic.APIStatusError as exc:
            raise ModelApiError(status_failure(exc)) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelApiError(Failure(None, "connection", str(exc)[:500])) from exc
        except transport_errors() as exc:  # the connection broke mid-stream
            kind = "timeout" if "timeout" in type(exc).__name__.lower() else "connection"
            if kind == "timeout":
                raise ModelStalled(f"the model API went silent mid-reply: {exc!r}") from exc
            raise ModelApiError(Failure(None, kind, f"{type(exc).__name__}: {exc}"[:500])) from exc


def request_bytes(body: dict[str, Any], cache: WireCache | None = None) -> bytes:
    """The request body as the SDK would send it for `messages.stream(**body)`: its keys in
    the SDK's order, compact JSON, UTF-8 unescaped — the same bytes (tests/agent/
    test_model_wire.py, bench/model_call.py check), serialized in C (orjson) instead of the
    SDK's walk of the params and stdlib JSON. With the `cache` that built the body, the
    history's messages go as the bytes they were sent as before."""
    ordered = {key: body[key] for key in SDK_BODY_ORDER if key in body}
    ordered.update((key, value) for key, value in body.items() if key not in ordered)
    ordered["stream"] = True
    if cache is None:
        return encode_json(ordered)
    try:
        return orjson.dumps({**ordered, "messages": [cache.as_sent(m) for m in ordered["messages"]]})
    except TypeError:  # something orjson cannot hold in the new tail: all of it through encode_json
        return encode_json(ordered)


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, as the SDK writes it; an integer orjson cannot hold (beyond 64
    bits) goes through stdlib JSON with the SDK's settings."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


# The order of the body's keys in the SDK's `messages.stream` (anthropic/resources/messages).
SDK_BODY_ORDER = ("max_tokens", "messages", "model", "system", "tools", "thinking")


def read_reply(response: Any) -> dict[str, Any]:
    """Read a 200 reply stream into its message; the API's `error` event mid-stream and a
    stream that stops early are ModelApiErrors, a reply that does not parse a ModelError."""
    reader = ReplyReader()
    try:
        for chunk in response.iter_bytes():
            reader.feed(chunk)
        return reader.message()
    except StreamError as exc:
        status = effective_status(response.status_code, exc.error_type)
        retry_after = retry_after_seconds(dict(response.headers.items()))
        raise ModelApiError(Failure(status, exc.error_type, exc.message[:500], retry_after)) from exc
    except StreamBroken as exc:
        raise ModelApiError(Failure(None, "connection", str(exc))) from exc
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, or not the API's events
        raise ModelError(f"model reply could not be parsed: {exc!r}"[:500]) from exc


def cut_response(response: Any) -> None:
    """Cut a streaming reply from another thread: shut its socket down, so that the read
    blocked on it wakes at once (closing the socket would leave that read blocked); the
    reading thread then closes the response. The API stops generating when it sees the
    connection go."""
    network = response.extensions.get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if sock is None:
        response.close()
        return
    with contextlib.suppress(OSError):  # already closed by the other side
        sock.shutdown(socket.SHUT_RDWR)


def status_failure(exc: Any) -> Failure:
    """An SDK `APIStatusError` (an error answer, or an `error` event mid-stream) as a Failure."""
    error_type, message = _error_fields(getattr(exc, "body", None))
    status = effective_status(getattr(exc, "status_code", None), error_type)
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    return Failure(
        status=status,
        error_type=error_type,
        message=message or str(exc)[:500],
        retry_after=retry_after_seconds(dict(headers.items())),
    )


def _error_fields(body: Any) -> tuple[str, str]:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("type") or ""), str(error.get("message") or "")[:500]
    return "", ""


def quiet_http_logs() -> None:
    """The HTTP library logs every request at INFO ("HTTP Request: POST .../v1/messages
    200 OK"): one formatted line per model call, ~1.7 % of a busy worker's CPU in a profile
    (docs/benchmarks.md section 11) and hundreds of lines a second at scale. Its warnings
    still show; each call's outcome is in the session's events."""
    for name in ("httpx2", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)


@cache
def http_module() -> Any:
    """The HTTP library the SDK uses (httpx2 in newer SDKs, httpx before)."""
    for name in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            return importlib.import_module(name)
    raise ImportError("neither httpx2 nor httpx is installed (the anthropic SDK needs one)")


@cache
def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP library's transport errors (httpx, or httpx2 in newer SDKs), which a broken
    stream raises past the SDK."""
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        error = getattr(module, "TransportError", None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)
