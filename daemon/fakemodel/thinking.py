"""Extended thinking in the fake model (docs/DEVELOPING.md), as the real API does it.

A request that asks for thinking (`thinking: {type: "enabled", budget_tokens}`) gets a reply
that opens with a `thinking` block (its text fresh on every call, with a `signature`) and a
`redacted_thinking` block (opaque `data`), before the script's own blocks. The server signs
both with a key of its own; `refusal(body)` then checks a request as the API does: with
thinking on, the assistant message of the turn being continued (the last one, whose tool
results the request carries) must hold its thinking blocks first, verbatim and in order —
a block changed, dropped or moved is a 400 `invalid_request_error`. Tests read what the
fake received to prove the history carried them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from daemon.agent.model import ModelReply
from daemon.turn.messages import RedactedThinkingBlock, ThinkingBlock

_KEY = secrets.token_bytes(32)  # this server's own: a signature from elsewhere does not verify


def _sign(text: str) -> str:
    return base64.b64encode(hmac.new(_KEY, text.encode(), hashlib.sha256).digest()).decode()


def asks_thinking(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def with_thinking(reply: ModelReply, body: dict[str, Any]) -> ModelReply:
    """`reply` opened with a fresh thinking block and a redacted one, when `body` asks for thinking."""
    if not asks_thinking(body) or any(isinstance(b, ThinkingBlock) for b in reply.content):
        return reply
    nonce = secrets.token_hex(6)
    text = f"Let me think this through ({nonce}): the step, the tools, then act."
    data = base64.b64encode(secrets.token_bytes(24)).decode()
    blocks = (
        ThinkingBlock(thinking=text, signature=_sign(text)),
        RedactedThinkingBlock(data=f"{data}.{_sign(data)}"),
    )
    return ModelReply(content=(*blocks, *reply.content), stop_reason=reply.stop_reason, usage=reply.usage)


def refusal(body: dict[str, Any]) -> str | None:
    """Why the API would refuse `body`'s thinking blocks (None: it would not)."""
    if not asks_thinking(body):
        return None
    messages = body.get("messages") or []
    last_assistant = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    if last_assistant is None or messages[-1].get("role") != "user":
        return None
    content = last_assistant.get("content")
    blocks = content if isinstance(content, list) else []
    if not any(b.get("type") == "tool_use" for b in blocks):
        return None  # a finished turn: the API lets its thinking go
    if not blocks or blocks[0].get("type") not in ("thinking", "redacted_thinking"):
        return (
            "messages: with thinking enabled, the assistant message before the tool results must "
            "start with its thinking block (preserve the blocks of the previous turn)"
        )
    for index, block in enumerate(blocks):
        if block.get("type") == "thinking" and not hmac.compare_digest(
            str(block.get("signature", "")), _sign(str(block.get("thinking", "")))
        ):
            return f"messages: content.{index}: invalid `signature` in `thinking` block"
        if block.get("type") == "redacted_thinking":
            data, _, signature = str(block.get("data", "")).rpartition(".")
            if not hmac.compare_digest(signature, _sign(data)):
                return f"messages: content.{index}: invalid `data` in `redacted_thinking` block"
    return None
