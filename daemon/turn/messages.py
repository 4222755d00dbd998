"""The agent's message history, typed (README's HTTP API, docs/DEVELOPING.md), and the pure functions
that build it.

The history is a list of `Message`s in the Anthropic Messages API shape, checkpointed to
Redis one JSON message per list entry after every turn. Everything here is pure: the loop
decides *when* a message is built, these functions decide *what* it contains — in
particular the delivery text of README's HTTP API (step text first, then each steer in offset
order, joined with exactly "\\n\\n", after the tool results of the same user message).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DELIVERY_SEPARATOR = "\n\n"

RESUME_NOTE = (
    "[WorkTrain] The session was resumed on another worker (the previous one stopped). Every "
    "tool call you made has its result above; nothing else of the interrupted attempt ran."
)
HANDOFF_NOTE = (
    "[WorkTrain] This session moved to another worker: the previous one stopped cleanly "
    "after its last turn was checkpointed. Carry on where you left off."
)


class Block(BaseModel):
    # extra="ignore": a wire block may carry fields we do not model (cache_control, citations)
    model_config = ConfigDict(frozen=True, extra="ignore")


class TextBlock(Block):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(Block):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(Block):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _block_content(cls, value: Any) -> Any:
        # The wire format also allows a list of text blocks here.
        if isinstance(value, list):
            return "".join(str(b.get("text", "")) for b in value if isinstance(b, dict))
        return value


class ThinkingBlock(Block):
    """Kept verbatim so it can be sent back, as the API requires when thinking is on."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(Block):
    """Thinking the API encrypted (its safety systems flagged it): opaque `data`, sent back
    verbatim like a thinking block (docs/DEVELOPING.md)."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


ContentBlock = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


class MessageMeta(BaseModel):
    """What WorkTrain knows of a message beyond its content: kept in the checkpoint, never
    sent to the model. The compactor (daemon/agent/compactor.py) keeps the current step's prompt
    and its steers verbatim by these, not by searching the text."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    steps: tuple[str, ...] = ()  # step prompts this user message delivered, in order
    steers: tuple[str, ...] = ()  # steer texts it delivered, in offset order
    summary: bool = False  # an assistant message the compactor wrote for older turns
    # docs/durability.md, the turn journal: the results of a turn's tools so far, written as each ends
    # (daemon/agent/journal.py); replaced by the turn's whole user message when it ends
    partial: bool | None = None
    awaiting: str | None = None  # ... and its signal_coordinator call waiting for a reply
    # The one turn numbering (README's Console, `numbered`): an assistant message's turn is the
    # turn whose model call wrote it; a user message's, the first turn whose request carried it.
    turn: int | None = None
    # The journal offsets of `steers`, in the same order (absent in checkpoints written before)
    steerOffsets: tuple[int, ...] = ()


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Literal["user", "assistant"]
    content: tuple[ContentBlock, ...]
    meta: MessageMeta | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _string_content(cls, value: Any) -> Any:
        # The wire format allows `"content": "text"`; the history always holds blocks.
        return [{"type": "text", "text": value}] if isinstance(value, str) else value

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [block for block in self.content if isinstance(block, ToolUseBlock)]

    @property
    def texts(self) -> list[str]:
        return [block.text for block in self.content if isinstance(block, TextBlock)]

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)

    def wire(self) -> dict[str, Any]:
        """The Messages API form of this message (no `None` fields, no `meta`)."""
        return self.model_dump(mode="json", exclude_none=True, exclude={"meta"})


def parse_message(raw: str | bytes) -> Message:
    return Message.model_validate_json(raw)


def delivery_text(step_texts: Sequence[str], steer_texts: Sequence[str]) -> str | None:
    """README's HTTP API: step text(s) first, then each steer in offset order, joined by "\\n\\n"."""
    parts = [*step_texts, *steer_texts]
    return DELIVERY_SEPARATOR.join(parts) if parts else None


def delivery_meta(step_texts: Sequence[str], steer_texts: Sequence[str]) -> MessageMeta | None:
    return (
        MessageMeta(steps=tuple(step_texts), steers=tuple(steer_texts)) if step_texts or steer_texts else None
    )


def first_message(step_prompt: str, steer_texts: Sequence[str]) -> Message:
    """The first user message: the first step's prompt, then steers accepted before turn 1."""
    text = delivery_text([step_prompt], steer_texts)
    assert text is not None
    return Message(
        role="user", content=(TextBlock(text=text),), meta=delivery_meta([step_prompt], steer_texts)
    )


def turn_end_message(
    results: Sequence[ToolResultBlock], step_texts: Sequence[str], steer_texts: Sequence[str]
) -> Message | None:
    """The user message after a turn: its tool results, then one text block of the delivery.

    None when there is nothing to say (no tool call and nothing delivered).
    """
    text = delivery_text(step_texts, steer_texts)
    blocks: list[ContentBlock] = list(results)
    if text is not None:
        blocks.append(TextBlock(text=text))
    if not blocks:
        return None
    return Message(role="user", content=tuple(blocks), meta=delivery_meta(step_texts, steer_texts))


def resumed_history(
    history: Sequence[Message], steer_texts: Sequence[str], note: str = RESUME_NOTE
) -> tuple[int, Message]:
    """How a resumed attempt rewrites the tail of its checkpoint: (keep, replacement).

    The checkpointed history ends with the user message the interrupted turn was about to
    send; the note (RESUME_NOTE, or HANDOFF_NOTE after a clean hand-over) and the steers
    drained but never checkpointed are appended to it
    (so roles still alternate). A history ending with an assistant message gets a new user
    message instead.
    """
    return extend_last_user(history, [note], steer_texts)


def fork_opening(
    history: Sequence[Message], steer_texts: Sequence[str], held: Sequence[str]
) -> tuple[int, Message]:
    """How a fork's first turn opens its copied history (daemon/forking/history.py
    `history_through`; README's "Fork a session"): the message after the turn it was forked
    from, with the fork's steer (and a step its gate held back, which the steer releases)
    delivered as README's HTTP API says — one text block after the tool results, step text
    first. (keep, message) as `resumed_history` answers."""
    last = history[-1]
    if last.role == "user":
        results = [b for b in last.content if isinstance(b, ToolResultBlock)]
        steps = list(last.meta.steps) if last.meta is not None else []
        message = turn_end_message(results, [*steps, *held], steer_texts)
        keep = len(history) - 1
    else:  # the turn asked for no tool: the steer is the whole message
        message = turn_end_message([], held, steer_texts)
        keep = len(history)
    if message is None:
        return len(history) - 1, last
    return keep, message


def extend_last_user(
    history: Sequence[Message], step_texts: Sequence[str], steer_texts: Sequence[str]
) -> tuple[int, Message]:
    """(keep, replacement): the history's last user message with one more text block, the
    delivery of `step_texts` and `steer_texts` (README's HTTP API), so roles still alternate; a
    history ending with an assistant message gets a new user message instead. Used when a
    request is sent again with more in it: a resumed attempt, an abandoned model call."""
    text = delivery_text(step_texts, steer_texts)
    assert text is not None
    if history and history[-1].role == "user":
        last = history[-1]
        meta = last.meta
        if steer_texts:
            meta = (meta or MessageMeta()).model_copy(
                update={"steers": (*(meta.steers if meta else ()), *steer_texts)}
            )
        return len(history) - 1, Message(
            role="user", content=(*last.content, TextBlock(text=text)), meta=meta
        )
    return len(history), Message(
        role="user", content=(TextBlock(text=text),), meta=delivery_meta([], steer_texts)
    )


def numbered(message: Message, turn: int, steer_offsets: Sequence[int] = ()) -> Message:
    """`message` as the checkpoint keeps it, with the turn numbering of README's Console.

    An assistant message takes `turn` (the turn whose call wrote it). A user message keeps the
    turn it already has (a message a later request extends — an abandoned call, a resume — was
    first read by the earlier turn) or takes `turn`, the turn its checkpoint expects to read
    it; the offsets of the steers just delivered in it join its `steerOffsets` when they line
    up with `meta.steers` (a question's reply carries its steers in a tool result instead).
    """
    meta = message.meta or MessageMeta()
    update: dict[str, Any] = {}
    if meta.turn is None:
        update["turn"] = turn
    if message.role == "user" and steer_offsets:
        offsets = (*meta.steerOffsets, *steer_offsets)
        if len(offsets) == len(meta.steers):
            update["steerOffsets"] = offsets
    if not update:
        return message
    return message.model_copy(update={"meta": meta.model_copy(update=update)})


def tool_signature(message: Message) -> tuple[tuple[str, str], ...]:
    """What the assistant asked for in a turn (name and input), to notice an agent going round."""
    return tuple((use.name, json.dumps(use.input, sort_keys=True)) for use in message.tool_uses)
