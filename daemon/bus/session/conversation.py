"""A session's conversation as its checkpoint holds it (README's Console: the console's turn-by-turn
view): the typed message history, read from the session's `history` list, each message with
its turn id.

Read-only and fenceless: it reads what the last checkpoint wrote (the live turn is not in it
until its reply is journaled). A tool result longer than `result_chars` is cut here so one
huge `Read` cannot make the page megabytes long; `ConversationMessage.cut` says which were
cut and how long they were.

One turn numbering (README's Console, SPEC 3.6 v5): the turn ids are the ones the record's
`turnCount`, the events and the steer journal use. The loop writes them into each message's
metadata as it checkpoints it (daemon/turn/messages.py `numbered`): an assistant message is
the turn whose model call wrote it; a user message the first turn whose request carried it.
A steer is the turn its journal says it was delivered to. A turn that left no reply (cut
short by an interrupt, a cancel, a stop) is a gap in the ids. Checkpoints written before the
ids existed are numbered by counting, as the console used to.
"""

from __future__ import annotations

import logging

import redis
from pydantic import BaseModel, Field, ValidationError

from daemon.bus.keys import Keys
from daemon.bus.session.registry import record_fields
from daemon.schema.records import JournalEntry, fold_journal
from daemon.turn.messages import ContentBlock, Message, MessageMeta, ToolResultBlock, parse_message

log = logging.getLogger(__name__)

RESULT_CHARS = 20_000  # a tool result past this is cut (its full length is reported)


class CutResult(BaseModel):
    toolUseId: str
    chars: int  # the result's full length


class ConversationSteer(BaseModel):
    offset: int | None = Field(description="Its offset in the steer journal (null in older checkpoints).")
    text: str
    turnId: int | None = Field(description="The turn it was delivered to (the journal's deliveredTurnId).")


class ConversationMessage(BaseModel):
    role: str
    content: list[ContentBlock]
    meta: MessageMeta | None = None
    cut: list[CutResult] = []
    turnId: int | None = Field(
        default=None,
        description="An assistant message: the turn whose model call wrote it. A user message: the first"
        " turn whose request carried it (null: no turn has read it yet). A compaction's summary: null.",
    )
    steers: list[ConversationSteer] = Field(
        default_factory=list, description="The steers this message delivered, in offset order."
    )


def _capped(block: ContentBlock, limit: int, cut: list[CutResult]) -> ContentBlock:
    if isinstance(block, ToolResultBlock) and len(block.content) > limit:
        cut.append(CutResult(toolUseId=block.tool_use_id, chars=len(block.content)))
        return block.model_copy(update={"content": block.content[:limit]})
    return block


def turn_ids(history: list[Message], turn_count: int | None = None) -> list[int | None]:
    """Each message's turn id (module docstring): its own, else, in a checkpoint from before
    the ids, an assistant message counts on from the last one and a user message takes the
    turn of the reply that answered it. A user message waiting for a turn that has not
    started (past `turn_count`, the record's) has none yet."""
    ids: list[int | None] = []
    last = 0
    for message in history:
        meta = message.meta
        if meta is not None and meta.summary:
            ids.append(None)
        elif meta is not None and meta.turn is not None:
            ids.append(meta.turn)
            last = meta.turn if message.role == "assistant" else last
        elif message.role == "assistant":
            last += 1
            ids.append(last)
        else:
            ids.append(None)  # filled below
    answered: int | None = None
    for index in reversed(range(len(history))):
        message = history[index]
        if message.role == "assistant" and ids[index] is not None:
            answered = ids[index]
        elif message.role == "user" and (message.meta is None or message.meta.turn is None):
            ids[index] = answered
    if turn_count is not None:
        ids = [
            None if m.role == "user" and turn is not None and turn > turn_count else turn
            for m, turn in zip(history, ids, strict=True)
        ]
    return ids


def steers_of(message: Message, turn: int | None, delivered: dict[int, int]) -> list[ConversationSteer]:
    """The steers a user message delivered, each with the turn the journal says read it."""
    meta = message.meta
    if meta is None or not meta.steers:
        return []
    offsets: list[int | None] = list(meta.steerOffsets)
    if len(offsets) != len(meta.steers):
        offsets = [None] * len(meta.steers)
    return [
        ConversationSteer(offset=offset, text=text, turnId=delivered.get(offset, turn) if offset else turn)
        for offset, text in zip(offsets, meta.steers, strict=True)
    ]


def numbered_conversation(
    history: list[Message],
    journal: list[JournalEntry],
    turn_count: int | None = None,
    result_chars: int = RESULT_CHARS,
) -> list[ConversationMessage]:
    """The history as the API serves it: turn ids, steers with their turns, long results cut.
    `turn_count`: the record's (the turns started so far)."""
    views = fold_journal(journal)
    delivered = {view.offset: view.deliveredTurnId for view in views if view.deliveredTurnId is not None}
    out: list[ConversationMessage] = []
    for message, turn in zip(history, turn_ids(history, turn_count), strict=True):
        cut: list[CutResult] = []
        content = [_capped(block, result_chars, cut) for block in message.content]
        out.append(
            ConversationMessage(
                role=message.role,
                content=content,
                meta=message.meta,
                cut=cut,
                turnId=turn,
                steers=steers_of(message, turn, delivered) if message.role == "user" else [],
            )
        )
    return out


def read_conversation(
    client: redis.Redis, keys: Keys, session_id: str, result_chars: int = RESULT_CHARS
) -> list[ConversationMessage]:
    """The checkpointed history of `session_id`, oldest first; [] before the first checkpoint."""
    session = keys.session(session_id)
    pipe = client.pipeline(transaction=True)
    pipe.lrange(session.history, 0, -1)
    pipe.xrange(session.journal)
    raw_history, entries = pipe.execute()
    [turn_count] = record_fields(client, keys, session_id, "turnCount")
    history: list[Message] = []
    for index, raw in enumerate(raw_history):
        try:
            history.append(parse_message(raw))
        except ValidationError as exc:  # one bad entry must not hide the rest of the conversation
            log.warning("session %s: history entry %d unreadable: %s", session_id, index, exc)
    journal = [JournalEntry.from_stream(eid, fields) for eid, fields in entries]
    count = int(turn_count) if turn_count is not None and turn_count.isdigit() else None
    return numbered_conversation(history, journal, count, result_chars)
