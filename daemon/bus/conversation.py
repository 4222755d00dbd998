"""A session's conversation as its checkpoint holds it (README's Console: the console's turn-by-turn
view): the typed message history, read from the session's `history` list.

Read-only and fenceless: it reads what the last checkpoint wrote (the live turn is not in it
until that turn ends). A tool result longer than `result_chars` is cut here so one huge
`Read` cannot make the page megabytes long; `ConversationMessage.cut` says which were cut
and how long they were.
"""

from __future__ import annotations

import logging

import redis
from pydantic import BaseModel, ValidationError

from daemon.bus.keys import Keys
from daemon.turn.messages import ContentBlock, MessageMeta, ToolResultBlock, parse_message

log = logging.getLogger(__name__)

RESULT_CHARS = 20_000  # a tool result past this is cut (its full length is reported)


class CutResult(BaseModel):
    toolUseId: str
    chars: int  # the result's full length


class ConversationMessage(BaseModel):
    role: str
    content: list[ContentBlock]
    meta: MessageMeta | None = None
    cut: list[CutResult] = []


def _capped(block: ContentBlock, limit: int, cut: list[CutResult]) -> ContentBlock:
    if isinstance(block, ToolResultBlock) and len(block.content) > limit:
        cut.append(CutResult(toolUseId=block.tool_use_id, chars=len(block.content)))
        return block.model_copy(update={"content": block.content[:limit]})
    return block


def read_conversation(
    client: redis.Redis, keys: Keys, session_id: str, result_chars: int = RESULT_CHARS
) -> list[ConversationMessage]:
    """The checkpointed history of `session_id`, oldest first; [] before the first checkpoint."""
    out: list[ConversationMessage] = []
    for index, raw in enumerate(client.lrange(keys.session(session_id).history, 0, -1)):
        try:
            message = parse_message(raw)
        except ValidationError as exc:  # one bad entry must not hide the rest of the conversation
            log.warning("session %s: history entry %d unreadable: %s", session_id, index, exc)
            continue
        cut: list[CutResult] = []
        content = [_capped(block, result_chars, cut) for block in message.content]
        out.append(ConversationMessage(role=message.role, content=content, meta=message.meta, cut=cut))
    return out
