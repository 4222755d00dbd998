"""The model the agent talks to: a small protocol, and its Anthropic Messages API adapter.

The loop sees only `Model.complete(request) -> ModelReply`; tests pass a scripted model.
`AnthropicModel` uses the official SDK (streaming, so a long reply never hits the
non-streaming timeout; the one streaming call is `AnthropicModel._stream`), marks the
system prompt and the last tool with `cache_control` (plus the last message block, so each
turn reuses the previous turn's cached prefix), leaves the SDK's own retries on, and turns
what is left after them into `ModelError` (the session fails with outcome `model_error`)
or `ModelStalled` (no byte from the API for the stall limit: outcome `stalled`). Given the
turn's `TurnInterrupt`, the call runs so that an interrupt steer abandons it at once
(daemon/interrupt.py): its stream is closed and its reply never read.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

from pydantic import RootModel

from daemon.interrupt import CallHandle, TurnInterrupt
from daemon.messages import ContentBlock, Message

DEFAULT_MAX_TOKENS = 8192
REAL_API_HOST = "api.anthropic.com"
FORBID_REAL_API_ENV = "WORKTRAIN_FORBID_REAL_API"
CACHE_CONTROL = {"type": "ephemeral"}


@dataclass(frozen=True)
class ModelRequest:
    system: str
    tools: Sequence[dict[str, Any]]
    messages: Sequence[Message]
    max_tokens: int = DEFAULT_MAX_TOKENS


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class ModelReply:
    content: tuple[ContentBlock, ...]
    stop_reason: str | None = "end_turn"
    usage: Usage = field(default_factory=Usage)

    def message(self) -> Message:
        return Message(role="assistant", content=self.content)


class Model(Protocol):
    def complete(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply:
        """The reply; with `interrupt`, raises daemon.interrupt.Interrupted as soon as the
        live turn is interrupted (the call abandoned, nothing of it kept)."""
        ...


class ModelError(Exception):
    """The model API failed after the SDK's retries: the session ends `failed`/`model_error`."""


class ModelStalled(ModelError):
    """The API sent nothing for the stall limit, retries included: outcome `stalled`."""


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


class SentAsIs(RootModel[list[dict[str, Any]]]):
    """The messages, already in wire form, handed to the SDK as one pydantic model.

    The SDK copies a request's params before sending them, walking every dict and list of
    the body in Python: for a long history that walk cost more than the rest of the
    daemon's turn (1.6 ms of CPU per call at turn 200, bench/turn_overhead.py). A pydantic
    model in the params is dumped instead of walked (pydantic-core, in C), into the same
    JSON: the bytes sent are identical.
    """


class WireCache:
    """The wire form of each history message, kept from one request to the next.

    The history only grows between turns, so each message is dumped once per session
    instead of once per turn: dumping the whole history every turn was the largest daemon
    cost per turn late in a long session (docs/benchmarks.md, "Per-turn overhead"). Keyed by
    identity; a message no longer in the request is forgotten. The cached dicts are shared
    with the bodies built from them, so nothing may mutate them (`wire_request` copies the
    one message it changes).
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Message, dict[str, Any]]] = {}

    def wire(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        kept: dict[int, tuple[Message, dict[str, Any]]] = {}
        out = []
        for message in messages:
            entry = self._entries.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, message.wire())
            kept[id(message)] = entry
            out.append(entry[1])
        self._entries = kept
        return out


def wire_request(request: ModelRequest, model: str, cache: WireCache | None = None) -> dict[str, Any]:
    """The Messages API body for `request`, with cache_control on tools, system and the tail."""
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
    return {
        "model": model,
        "max_tokens": request.max_tokens,
        "system": [{"type": "text", "text": request.system, "cache_control": CACHE_CONTROL}],
        "tools": tools,
        "messages": messages,
    }


def reply_from_sdk(message: Any) -> ModelReply:
    """An SDK `Message` (or its dict form) as a ModelReply; unknown block types are dropped."""
    data = message if isinstance(message, dict) else message.model_dump(mode="json")
    known = {"text", "tool_use", "thinking"}
    blocks = tuple(
        Message.model_validate(
            {"role": "assistant", "content": [b for b in data.get("content", []) if b.get("type") in known]}
        ).content
    )
    usage = data.get("usage") or {}
    return ModelReply(
        content=blocks,
        stop_reason=data.get("stop_reason"),
        usage=Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
            cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
        ),
    )


class AnthropicModel:
    """The real model, through the `anthropic` SDK (ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL)."""

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        stall_seconds: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        import anthropic  # heavy: imported where the model is built, not by every command

        base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        forbid_real_api(base_url)
        self.model = model
        self.wire_cache = WireCache()
        self.client = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            # read: the longest silence tolerated from a streaming reply (the stall limit)
            timeout=anthropic.Timeout(connect=10.0, read=stall_seconds, write=60.0, pool=60.0),
        )

    def complete(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply:
        body = wire_request(request, self.model, self.wire_cache)
        body["messages"] = SentAsIs(body["messages"])
        if interrupt is None:
            return reply_from_sdk(self._stream(body))
        return reply_from_sdk(interrupt.abandonable(lambda handle: self._stream(body, handle)))

    def _stream(self, body: dict[str, Any], handle: CallHandle | None = None) -> Any:
        """The one streaming call to the API; every way it fails becomes a ModelError. With
        a `handle`, an interrupt can cut the stream from another thread (`cut_stream`)."""
        import anthropic

        try:
            with self.client.messages.stream(**body) as stream:
                if handle is not None:
                    handle.opened(lambda: cut_stream(stream))
                return stream.get_final_message()
        except anthropic.APITimeoutError as exc:
            raise ModelStalled(f"the model API sent nothing in time (after retries): {exc}") from exc
        except anthropic.APIStatusError as exc:
            raise ModelError(f"model API error {exc.status_code}: {_error_message(exc)}") from exc
        except anthropic.APIError as exc:
            raise ModelError(f"model API unreachable: {exc}") from exc
        except ValueError as exc:  # the SDK could not parse a streamed tool input
            raise ModelError(f"model reply could not be parsed: {exc}") from exc


def cut_stream(stream: Any) -> None:
    """Cut a streaming reply from another thread: shut its socket down, so that the read
    blocked on it wakes at once (closing the socket would leave that read blocked); the
    reading thread then closes the response. The API stops generating when it sees the
    connection go."""
    network = stream.response.extensions.get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if sock is None:
        stream.response.close()
        return
    with contextlib.suppress(OSError):  # already closed by the other side
        sock.shutdown(socket.SHUT_RDWR)


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return f"{error.get('type', 'error')}: {error['message']}"
    return str(exc)[:500]
