"""The events a model reply gives rise to: `llm_turn_completed`, and `agent_stuck` when the
agent goes round (docs/DEVELOPING.md). Pure but for the repeat count kept on the attempt."""

from __future__ import annotations

from daemon.agent.model import ModelReply
from daemon.agent.state import AttemptState
from daemon.schema.events import AgentStuck, LlmTurnCompleted, reply_text
from daemon.turn.messages import Message, tool_signature

STUCK_REPEATS = 3  # the same tool calls this many turns in a row: `agent_stuck`


def llm_completed(session_id: str, turn: int, reply: ModelReply) -> LlmTurnCompleted:
    return LlmTurnCompleted(
        sessionId=session_id,
        turnId=turn,
        stopReason=reply.stop_reason,
        inputTokens=reply.usage.input_tokens,
        outputTokens=reply.usage.output_tokens,
        cacheReadTokens=reply.usage.cache_read_tokens,
        cacheWriteTokens=reply.usage.cache_write_tokens,
        text=reply_text(reply.message().texts),
    )


def stuck(s: AttemptState, turn: int, message: Message) -> list[AgentStuck]:
    """`agent_stuck` when the agent asks for the same tool calls STUCK_REPEATS turns in a row."""
    signature = tool_signature(message)
    s.repeats = s.repeats + 1 if signature and signature == s.signature else 1
    s.signature = signature
    if s.repeats != STUCK_REPEATS:
        return []
    reason = f"the same tool calls {STUCK_REPEATS} turns in a row: {', '.join(n for n, _ in signature)}"
    return [AgentStuck(sessionId=s.session_id, turnId=turn, reason=reason)]
