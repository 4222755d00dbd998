"""The compactor (docs/DEVELOPING.md): what a compacted history keeps, and how the rest is summarised.

Pure: it plans and builds; the model call that writes the summary, the checkpoint and the
event are the caller's (daemon/agent/modelturn.py). A compacted history is

    [0] user       the opening message (goal and first step), verbatim
    [1] assistant  the summary of every older turn (meta.summary)
    [2] user       a note saying so, then the current step's prompt and every steer
                   delivered during the current step that the kept turns do not carry,
                   verbatim and once (meta.steps / meta.steers)
    [3...]         the newest whole turns that fit the tail budget (half the window):
                   an assistant message with the user message after it, so a `tool_use`
                   never loses its `tool_result`

so roles still alternate, and a later compaction finds the current step by the same
metadata (`MessageMeta`, kept in the checkpoint, never sent). Tokens are estimated at
about 4 characters of the wire JSON a token.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.agent.model import ModelRequest
from daemon.schema.events import input_summary
from daemon.turn.messages import (
    DELIVERY_SEPARATOR,
    ContentBlock,
    Message,
    MessageMeta,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    delivery_text,
)

CHARS_PER_TOKEN = 4
RESULT_CHARS = 2000  # a tool result in the summary request, before the whole is fitted
SUMMARY_SYSTEM = (
    "You summarise the earlier part of an autonomous coding agent's session so that it can "
    "carry on without it. Be specific and brief: file names, commands, findings, decisions."
)
SUMMARY_INSTRUCTION = (
    "The transcript above is the older part of your session; it is about to be removed from "
    "your context to make room. Summarise it for yourself, in at most a few hundred words: "
    "what was done (files read and changed, commands run, with their results), what was "
    "learned, and what is still open. Do not call tools; answer with the summary only."
)
COMPACTED_NOTE = (
    "[WorkTrain] {turns} earlier turn(s) of this session were compacted into the summary "
    "above, to fit the context window. The turns after this message are verbatim."
)
CURRENT_STEP_NOTE = "The current step, and what the coordinator said during it:"

Count = Callable[[Message], int]


def message_tokens(message: Message) -> int:
    """The estimated tokens of one message as sent (4 characters of its JSON a token)."""
    return len(json.dumps(message.wire())) // CHARS_PER_TOKEN


def fixed_tokens(system: str, tools: Sequence[dict[str, Any]]) -> int:
    """What every request carries besides the messages: the system prompt and the tools."""
    return (len(json.dumps(system)) + len(json.dumps(list(tools)))) // CHARS_PER_TOKEN


@dataclass(frozen=True)
class Plan:
    opening: Message
    dropped: tuple[Message, ...]  # summarised
    kept: tuple[Message, ...]  # verbatim, newest turns
    step_prompt: str | None  # the current step's prompt, when no kept message carries it
    step_steers: tuple[str, ...]  # the current step's steers that no kept message carries
    turns: int  # turns summarised (the summaries of earlier compactions not counted)


def turn_starts(history: Sequence[Message]) -> list[int]:
    """Where each whole turn after the opening starts: its assistant message."""
    return [i for i in range(1, len(history)) if history[i].role == "assistant"]


def plan(
    history: Sequence[Message], tail_budget: int, current_prompt: str | None, count: Count
) -> Plan | None:
    """What to keep and what to summarise; None when there is nothing to summarise.

    The newest turn is always kept, then older ones while they fit `tail_budget` tokens: the
    last assistant turn's thinking blocks (docs/DEVELOPING.md) are never cut.
    """
    starts = turn_starts(history)
    if len(starts) < 2:
        return None
    kept_from = len(starts)
    used = 0
    for k in reversed(range(len(starts))):
        end = starts[k + 1] if k + 1 < len(starts) else len(history)
        size = sum(count(history[i]) for i in range(starts[k], end))
        if kept_from < len(starts) and used + size > tail_budget:
            break
        used += size
        kept_from = k
    if kept_from == 0:
        return None
    cut = starts[kept_from]
    dropped = tuple(history[starts[0] : cut])
    prompt, steers = current_step(history, starts[0], cut, current_prompt)
    turns = sum(1 for m in dropped if m.role == "assistant" and not (m.meta and m.meta.summary))
    return Plan(history[0], dropped, tuple(history[cut:]), prompt, steers, turns)


def current_step(
    history: Sequence[Message], first: int, cut: int, current_prompt: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """The current step's prompt and steers that fall in the dropped part [first, cut)."""
    start = next((i for i in reversed(range(len(history))) if _starts_step(history[i])), None)
    if start is None:  # a history from before messages carried metadata
        kept_texts = [t for m in (history[0], *history[cut:]) for t in m.texts]
        if current_prompt and not any(current_prompt in t for t in kept_texts):
            return current_prompt, ()
        return None, ()
    if start >= cut:
        return None, ()
    steers: list[str] = []
    for i in range(max(start, first), cut):
        meta = history[i].meta
        if meta is not None:
            steers.extend(meta.steers)
    if start < first:  # the opening started the current step: it keeps its prompt
        return None, tuple(steers)
    meta = history[start].meta
    assert meta is not None
    return meta.steps[-1], tuple(steers)


def _starts_step(message: Message) -> bool:
    return message.meta is not None and bool(message.meta.steps)


def compacted(p: Plan, summary: str, turn: int | None = None) -> list[Message]:
    """The new history: opening, summary, the current step's part, the kept turns. `turn`:
    the live turn, which reads the note first (README's Console: one turn numbering)."""
    note: list[ContentBlock] = [TextBlock(text=COMPACTED_NOTE.format(turns=p.turns))]
    steps = [p.step_prompt] if p.step_prompt else []
    step_text = delivery_text(steps, p.step_steers)
    if step_text is not None:
        note.append(TextBlock(text=f"{CURRENT_STEP_NOTE}{DELIVERY_SEPARATOR}{step_text}"))
    meta = (
        MessageMeta(steps=tuple(steps), steers=p.step_steers, turn=turn)
        if step_text is not None or turn is not None
        else None
    )
    return [
        p.opening,
        Message(role="assistant", content=(TextBlock(text=summary),), meta=MessageMeta(summary=True)),
        Message(role="user", content=tuple(note), meta=meta),
        *p.kept,
    ]


def summary_request(p: Plan, max_chars: int, max_tokens: int) -> ModelRequest:
    """One tool-less call: the dropped part, then the instruction to summarise it."""
    opening = shortened("\n\n".join(p.opening.texts), 4000)
    body = transcript(p.dropped, max_chars)
    text = f"The task, as it was given to you:\n{opening}\n\nTranscript:\n{body}\n\n{SUMMARY_INSTRUCTION}"
    message = Message(role="user", content=(TextBlock(text=text),))
    # no thinking: its own small budget, and a summary needs none (the thinking blocks of the
    # dropped turns are not in the transcript: the kept turns keep theirs verbatim)
    return ModelRequest(SUMMARY_SYSTEM, (), (message,), max_tokens=max_tokens, allow_thinking=False)


def transcript(messages: Sequence[Message], max_chars: int) -> str:
    """The messages as plain text, each tool result shortened so that the whole fits."""
    blocks = sum(len(m.content) for m in messages) or 1
    per_result = max(min(RESULT_CHARS, max_chars // blocks), 200)
    lines = _lines(messages, per_result)
    return shortened("\n".join(lines), max_chars)


def _lines(messages: Sequence[Message], per_result: int) -> list[str]:
    names: dict[str, str] = {}
    turn = 0
    lines: list[str] = []
    for message in messages:
        if message.role == "assistant" and message.meta and message.meta.summary:
            lines.append("Summary of even earlier turns: " + " ".join(message.texts))
            continue
        if message.role == "assistant":
            turn = message.meta.turn if message.meta and message.meta.turn else turn + 1
        for block in message.content:
            lines.extend(_block_lines(block, turn, message.role, names, per_result))
    return lines


def _block_lines(
    block: ContentBlock, turn: int, role: str, names: dict[str, str], per_result: int
) -> list[str]:
    if isinstance(block, TextBlock):
        who = "you said" if role == "assistant" else "user"
        return [f"[turn {turn}] {who}: {shortened(block.text, per_result)}"]
    if isinstance(block, ToolUseBlock):
        names[block.id] = block.name
        return [f"[turn {turn}] you called {block.name} {input_summary(block.input, 120)}"]
    if isinstance(block, ToolResultBlock):
        name = names.get(block.tool_use_id, "a tool")
        status = "error" if block.is_error else "result"
        return [f"[turn {turn}] {status} of {name}: {shortened(block.content, per_result)}"]
    return []


def digest(p: Plan, max_chars: int) -> str:
    """The summary when the summary call failed: the tool calls, mechanically."""
    ok: dict[str, str] = {}
    for message in p.dropped:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                ok[block.tool_use_id] = f"error: {shortened(block.content, 80)}" if block.is_error else "ok"
    lines = [f"(A mechanical digest of {p.turns} earlier turn(s): writing a summary failed.)"]
    turn = 0
    for message in p.dropped:
        if message.role != "assistant":
            continue
        if message.meta and message.meta.summary:  # an earlier compaction's summary
            lines.extend(f"Earlier: {shortened(t, 500)}" for t in message.texts)
            continue
        turn = message.meta.turn if message.meta and message.meta.turn else turn + 1
        for use in message.tool_uses:
            result = ok.get(use.id, "no result")
            lines.append(f"- turn {turn}: {use.name} {input_summary(use.input, 80)} -> {result}")
    return shortened("\n".join(lines), max_chars)


def shortened(text: str, max_chars: int) -> str:
    """`text`, or its start and end with the cut said, within about `max_chars`."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 40, 20)
    head, tail = text[: keep * 2 // 3], text[-(keep // 3) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"
