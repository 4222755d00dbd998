"""Scripted model replies: shared by the in-process `ScriptedModel` and the HTTP fake server.

A script is a list of items answered in order; an item is a `ModelReply`, a `FakeError`,
or a function of the request returning one (for replies that depend on what was sent, or
that do something at the moment of the call). A rule is one such function answering every
request. `demo_rule` walks any workflow the way a diligent (if unimaginative) agent would.
"""

from __future__ import annotations

import itertools
import json
import secrets
import string
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.agent.model import ModelApiError, ModelReply, ModelRequest, ModelStalled, Usage, wire_request
from daemon.agent.retrypolicy import Failure, effective_status
from daemon.fakemodel.usage import prompt_tokens
from daemon.turn.interrupt import TurnInterrupt
from daemon.turn.messages import (
    DELIVERY_SEPARATOR,
    ContentBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)


@dataclass(frozen=True)
class FakeError:
    """An API error answer: HTTP status, error type and message (x-should-retry as given).

    `retry_after` / `retry_after_ms` send the `retry-after` (seconds) / `retry-after-ms`
    headers; `midstream` answers 200 and breaks the stream with an `error` event after
    `message_start`, as the API does when it overloads mid-reply."""

    status: int = 500
    type: str = "api_error"
    message: str = "fake model error"
    retry: bool = False
    retry_after: float | None = None
    retry_after_ms: float | None = None
    midstream: bool = False

    def failure(self) -> Failure:
        """What the adapter would make of this answer (for the in-process ScriptedModel)."""
        wait = self.retry_after_ms / 1000 if self.retry_after_ms is not None else self.retry_after
        status = effective_status(200 if self.midstream else self.status, self.type)
        return Failure(status, self.type, self.message, None if self.midstream else wait)


def overloaded(retry_after: float | None = None, midstream: bool = False) -> FakeError:
    """529 overloaded_error, as the API answers under load."""
    return FakeError(529, "overloaded_error", "Overloaded", retry_after=retry_after, midstream=midstream)


def rate_limited(retry_after: float | None = None) -> FakeError:
    return FakeError(
        429, "rate_limit_error", "Number of requests has exceeded your rate limit", retry_after=retry_after
    )


def unavailable(retry_after: float | None = None) -> FakeError:
    return FakeError(503, "api_error", "Service unavailable", retry_after=retry_after)


def prompt_too_long(tokens: int, maximum: int) -> FakeError:
    """The real API's answer to a request over the context window."""
    return FakeError(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum")


def weather(spec: str) -> list[FakeError]:
    """Errors from a short spec, for `python -m daemon.fakemodel --errors`: comma-separated
    `STATUS` or `STATUS:RETRY_AFTER_SECONDS`, or `stream-overload` (529 mid-stream)."""
    errors = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        if item == "stream-overload":
            errors.append(overloaded(midstream=True))
            continue
        status, _, after = item.partition(":")
        wait = float(after) if after else None
        code = int(status)
        kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(code, "api_error")
        if 400 <= code < 500 and code not in (408, 409, 429):
            kind = "invalid_request_error"
        errors.append(FakeError(code, kind, f"fake {code}", retry_after=wait))
    return errors


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


ID_ALPHABET = string.ascii_letters + string.digits


def fresh_id(prefix: str) -> str:
    """An id like the API's (`toolu_01...`, `msg_01...`): random, never the same twice."""
    return prefix + "01" + "".join(secrets.choice(ID_ALPHABET) for _ in range(22))


def with_fresh_ids(answer: Answer) -> Answer:
    """The reply with every tool_use id minted anew, as the real API does on every call: a
    request asked twice never gets the same ids back (docs/durability.md), whatever id the script
    wrote (a script's ids only say which tool is which when the script is read)."""
    if not isinstance(answer, ModelReply):
        return answer
    content = tuple(
        block.model_copy(update={"id": fresh_id("toolu_")}) if isinstance(block, ToolUseBlock) else block
        for block in answer.content
    )
    return ModelReply(content, answer.stop_reason, answer.usage)


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
        """The next item's (or the rule's) answer, its tool ids fresh (`with_fresh_ids`)."""
        with self._lock:
            item: ScriptItem | None = self._items.pop(0) if self._items else None
        if item is None:
            if self.rule is None:
                raise ScriptExhausted("the fake model's script is exhausted and it has no rule")
            return with_fresh_ids(self.rule(request))
        return with_fresh_ids(item(request) if callable(item) else item)


class ScriptedModel:
    """An in-process `Model` for loop tests: no HTTP, the script's answers, every request kept.

    `max_prompt_tokens` imitates the context window the way the HTTP fake does (a request
    of more tokens than that, at 4 characters a token, is answered 400 "prompt is too
    long"); `usage` then reports the request's size as the API would."""

    def __init__(
        self, items: Iterable[ScriptItem] = (), rule: Rule | None = None, max_prompt_tokens: int | None = None
    ) -> None:
        self.script = Script(items, rule)
        self.requests: list[ModelRequest] = []
        self.max_prompt_tokens = max_prompt_tokens

    def complete(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply:
        self.requests.append(request)
        if interrupt is None:
            return self._answer(request)
        return interrupt.abandonable(lambda _handle: self._answer(request))

    def _answer(self, request: ModelRequest) -> ModelReply:
        tokens = request_tokens(request)
        if self.max_prompt_tokens is not None and tokens > self.max_prompt_tokens:
            raise ModelApiError(prompt_too_long(tokens, self.max_prompt_tokens).failure())
        answer = self.script.answer(request)
        if isinstance(answer, FakeError):
            if answer.type == "stalled":
                raise ModelStalled(answer.message)
            raise ModelApiError(answer.failure())
        if self.max_prompt_tokens is None:
            return answer
        usage = Usage(1, answer.usage.output_tokens, 0, max(tokens - 1, 0))
        return ModelReply(answer.content, answer.stop_reason, usage)


def request_tokens(request: ModelRequest) -> int:
    """The fake's token count of a request (daemon/fakemodel/usage.py), as the HTTP fake counts it."""
    return prompt_tokens(wire_request(request, "fake"))


# --- rules ----------------------------------------------------------------------------------


def summary_reply(request: ModelRequest) -> ModelReply:
    """How the fake answers a request without tools (the compactor's summary call)."""
    said = " ".join(text for m in request.messages for text in m.texts)
    turns = said.count("[turn ")
    return reply(
        text(f"Summary (fake model): {turns} earlier turn(s) were read, tools ran, nothing is open.")
    )


def summarising(rule: Rule) -> Rule:
    """`rule`, except that a request without tools (a compaction summary) gets a summary."""

    def answer(request: ModelRequest) -> Answer:
        return summary_reply(request) if not request.tools else rule(request)

    return answer


def _tool_names(messages: Sequence[Message]) -> list[str]:
    return [use.name for m in messages if m.role == "assistant" for use in m.tool_uses]


def _step_prompts(message: Message) -> list[str]:
    """The step prompts a message's continue_workflow results carry (the next step's, which the
    daemon delivers as text after them)."""
    prompts = []
    for block in message.content:
        if not isinstance(block, ToolResultBlock) or block.is_error:
            continue
        try:
            step = json.loads(block.content).get("step")
        except (ValueError, AttributeError):
            continue
        if isinstance(step, dict) and isinstance(step.get("prompt"), str) and step["prompt"]:
            prompts.append(step["prompt"])
    return prompts


def coordinator_said(messages: Sequence[Message]) -> list[str]:
    """What the coordinator said since the last reply: the last user message's text after its
    tool results (README's HTTP API: step text, then each steer, joined by a blank line), less
    the step prompts its continue_workflow results carry and WorkTrain's own notes. The
    opening message's step prompt is not known here: it is left out whole."""
    if len(messages) < 2 or messages[-1].role != "user":
        return []
    last = messages[-1]
    said: list[str] = []
    for block_text in last.texts:
        for prompt in _step_prompts(last):
            block_text = block_text.replace(prompt, "")
        parts = (part.strip() for part in block_text.split(DELIVERY_SEPARATOR))
        said.extend(part for part in parts if part and not part.startswith("[WorkTrain]"))
    return said


def demo_rule(request: ModelRequest) -> Answer:
    """Walk any workflow: read a file, report one issue, continue with real notes; repeat.

    Its first reply reads README.md, reports an `info` issue once and continues; later ones list
    the workspace and continue. Each steer it received is quoted back in the reply's text
    (`coordinator_said`), so a newcomer sees the steer reached the agent.
    A request without tools (the compactor's summary call) gets a summary.
    """
    if not request.tools:
        return summary_reply(request)
    messages = list(request.messages)
    turn = sum(1 for m in messages if m.role == "assistant") + 1  # its own replies, not the daemon's turn id
    said = "Working through the current step."
    for steer in coordinator_said(messages):  # the steer reached the agent: it says so
        said += f" You said: {json.dumps(steer[:300], ensure_ascii=False)} — noted, I will do that."
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
