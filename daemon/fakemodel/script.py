"""Scripted model replies: shared by the in-process `ScriptedModel` and the HTTP fake server.

A script is a list of items answered in order; an item is a `ModelReply`, a `FakeError`,
or a function of the request returning one (for replies that depend on what was sent, or
that do something at the moment of the call). A rule is one such function answering every
request. `demo_rule` walks any workflow the way a diligent (if unimaginative) agent would.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.interrupt import TurnInterrupt
from daemon.messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from daemon.model import ModelError, ModelReply, ModelRequest, ModelStalled, Usage


@dataclass(frozen=True)
class FakeError:
    """An API error answer: HTTP status, error type and message (x-should-retry as given)."""

    status: int = 500
    type: str = "api_error"
    message: str = "fake model error"
    retry: bool = False


Answer = ModelReply | FakeError
ScriptItem = Answer | Callable[[ModelRequest], Answer]
Rule = Callable[[ModelRequest], Answer]

_ids = itertools.count(1)


def text(value: str) -> TextBlock:
    return TextBlock(text=value)


def tool(name: str, tool_id: str | None = None, **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id or f"toolu_fake_{next(_ids):04d}", name=name, input=tool_input)


def reply(*blocks: ContentBlock, stop_reason: str | None = None, usage: Usage | None = None) -> ModelReply:
    """A reply; stop_reason defaults to tool_use when it asks for tools, else end_turn."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(isinstance(b, ToolUseBlock) for b in blocks) else "end_turn"
    return ModelReply(content=tuple(blocks), stop_reason=stop_reason, usage=usage or Usage(10, 5))


class ScriptExhausted(AssertionError):
    """The model was called more times than the script has items."""


class Script:
    """Thread-safe: answers requests in order from the items, then from the rule (if any)."""

    def __init__(self, items: Iterable[ScriptItem] = (), rule: Rule | None = None) -> None:
        self._items = list(items)
        self.rule = rule
        self._lock = threading.Lock()

    def extend(self, items: Iterable[ScriptItem]) -> None:
        with self._lock:
            self._items.extend(items)

    def answer(self, request: ModelRequest) -> Answer:
        with self._lock:
            item: ScriptItem | None = self._items.pop(0) if self._items else None
        if item is None:
            if self.rule is None:
                raise ScriptExhausted("the fake model's script is exhausted and it has no rule")
            return self.rule(request)
        return item(request) if callable(item) else item


class ScriptedModel:
    """An in-process `Model` for loop tests: no HTTP, the script's answers, every request kept."""

    def __init__(self, items: Iterable[ScriptItem] = (), rule: Rule | None = None) -> None:
        self.script = Script(items, rule)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply:
        self.requests.append(request)
        if interrupt is None:
            return self._answer(request)
        return interrupt.abandonable(lambda _handle: self._answer(request))

    def _answer(self, request: ModelRequest) -> ModelReply:
        answer = self.script.answer(request)
        if isinstance(answer, FakeError):
            if answer.type == "stalled":
                raise ModelStalled(answer.message)
            raise ModelError(f"model API error {answer.status}: {answer.type}: {answer.message}")
        return answer


# --- the demo rule --------------------------------------------------------------------------


def _tool_names(messages: Sequence[Message]) -> list[str]:
    return [use.name for m in messages if m.role == "assistant" for use in m.tool_uses]


def _last_delivery(messages: Sequence[Message]) -> str | None:
    """The text the daemon put after the tool results of the last user message, if any."""
    if not messages or messages[-1].role != "user":
        return None
    has_results = any(isinstance(b, ToolResultBlock) for b in messages[-1].content)
    texts = messages[-1].texts
    return texts[-1] if texts and (has_results or len(messages) > 1) else None


def demo_rule(request: ModelRequest) -> Answer:
    """Walk any workflow: read a file, report one issue, continue with real notes; repeat.

    Turn 1 reads README.md, reports an `info` issue once and continues; later turns list the
    workspace and continue. A coordinator's message is acknowledged in the reply's text.
    """
    messages = list(request.messages)
    turn = sum(1 for m in messages if m.role == "assistant") + 1
    delivery = _last_delivery(messages)
    said = f"Turn {turn}: working through the current step."
    if delivery:
        said += f" I received: {json.dumps(delivery[:200])}."
    blocks: list[ContentBlock] = [text(said)]
    names = _tool_names(messages)
    if turn == 1:
        blocks.append(tool("Read", path="README.md", tool_id=f"toolu_demo_{turn}_read"))
    else:
        blocks.append(tool("Read", path=".", tool_id=f"toolu_demo_{turn}_list"))
    if "report_issue" not in names:
        blocks.append(
            tool(
                "report_issue",
                tool_id=f"toolu_demo_{turn}_issue",
                kind="self_correction",
                severity="info",
                summary="Demo agent: nothing is wrong; this shows how an issue is reported.",
            )
        )
    notes = (
        f"Demo notes for turn {turn}: I looked at the workspace (README.md and its top-level "
        "files) and move the workflow on; nothing is blocking."
    )
    blocks.append(tool("continue_workflow", tool_id=f"toolu_demo_{turn}_continue", notes=notes))
    return reply(*blocks)


RULES: dict[str, Rule] = {"demo": demo_rule}
