"""A turn's model call, as the loop makes it: compact when the history nears the window, call
through the cap and the weather, and when the API still says "prompt is too long", compact
to half the window and call once more (docs/DEVELOPING.md).

The request size is estimated before every call from the last call's reported usage
(input + cache read + cache write + output tokens: with prompt caching `input_tokens` alone
is only what follows the last breakpoint) plus about 4 characters a token for what was
added since; after a compaction, or on a resumed attempt, from the characters alone. Above
`compact_at` of the window the compactor (daemon/agent/compactor.py) runs first; its result is
checkpointed at once (a resumed session carries on compacted, the stored history stays
bounded) and announced as `context_compacted`. The prompt cache keeps working: the
breakpoints are placed on each request as it is built (daemon.agent.model.wire_request), so the
compacted prefix is written once and read by every call after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from daemon.agent import compactor
from daemon.agent.endings import Ending
from daemon.agent.model import Model, ModelError, ModelReply, ModelRequest
from daemon.agent.modelcall import CallSettings, ModelCalls, PromptTooLong
from daemon.agent.state import AttemptState, SessionState
from daemon.agent.waiting import Pause, WatchedChannel
from daemon.host.clock import Clock
from daemon.schema.events import ContextCompacted
from daemon.schema.records import SessionStatus
from daemon.tools import Emitter

log = logging.getLogger(__name__)

SUMMARY_SHARE = 8  # the summary call may answer up to 1/8 of the window (at most 4096 tokens)


class CompactingChannel(WatchedChannel, Protocol):
    def checkpoint(
        self,
        keep: int,
        messages: Sequence[str],
        delivered: Sequence[int],
        receiving_turn: int,
        fields: dict[str, str | int] | None = None,
    ) -> None: ...


@dataclass
class Baseline:
    """What the last measurement covered: `tokens` for the first `length` messages."""

    tokens: int
    length: int


class ModelTurn:
    """The model calls of one attempt at a session (built once, before its first turn)."""

    def __init__(
        self,
        s: SessionState,
        own: AttemptState,
        model: Model,
        channel: CompactingChannel,
        clock: Clock,
        events: Emitter,
        settings: CallSettings,
        stop: Callable[[], bool],
        specs: Sequence[dict[str, Any]],
    ) -> None:
        self.s = s
        self.session_id = own.session_id
        self.system = own.system
        if isinstance(name := getattr(model, "model", None), str):
            s.model = name  # what the record's costUsd prices (a scripted test model has none)
        self.channel = channel
        self.events = events
        self.settings = settings
        self.specs = specs
        self.calls = ModelCalls(
            model, own.session_id, Pause(channel, clock, stop, settings.wake), events, clock, settings
        )
        self.fixed = compactor.fixed_tokens(own.system, specs)
        self.baseline: Baseline | None = None

    def __call__(self, turn: int) -> ModelReply | Ending:
        window = self.settings.context_tokens
        before = self.estimate()
        if before > self.settings.compact_at * window:
            compacted = self.compact(turn, before, hard=False)
            if isinstance(compacted, Ending):
                return compacted
        try:
            return self.call(turn)
        except PromptTooLong as too_long:
            log.warning("session %s turn %d: %s", self.session_id, turn, too_long)
            counted = too_long.tokens or self.estimate()
            compacted = self.compact(turn, counted, hard=True)
            if isinstance(compacted, Ending):
                return compacted
            if not compacted:
                return overflow(f"{too_long}, and there is nothing left to compact")
        try:
            return self.call(turn)
        except PromptTooLong as again:
            return overflow(f"{again}, even after compacting to half the window")

    def call(self, turn: int) -> ModelReply | Ending:
        s = self.s
        request = ModelRequest(self.system, self.specs, tuple(s.history))
        reply = self.calls.complete(turn, request)
        if isinstance(reply, ModelReply):
            s.usage = s.usage + reply.usage
            # the reply's own tokens are its output tokens: the baseline covers it too
            self.baseline = Baseline(
                reply.usage.prompt_tokens + reply.usage.output_tokens, len(request.messages) + 1
            )
        return reply

    def estimate(self) -> int:
        """The next request's tokens: the last measurement plus what was added since."""
        history = self.s.history
        base = self.baseline
        if base is None or base.length > len(history):
            return self.fixed + sum(compactor.message_tokens(m) for m in history)
        return base.tokens + sum(compactor.message_tokens(m) for m in history[base.length :])

    def compact(self, turn: int, before: int, hard: bool) -> bool | Ending:
        """Compact the history now; False when there is nothing to summarise.

        Normal: keep the newest turns that fit half the window. Hard (the API said the
        prompt is too long): the whole request to half the window, scaled by how far the
        estimate was below the API's own count."""
        s = self.s
        window = self.settings.context_tokens
        tail = window // 2
        if hard:
            low = max(before / max(self.estimate(), 1), 1.0)  # the estimate's shortfall
            head = self.fixed + compactor.message_tokens(s.history[0]) + window // SUMMARY_SHARE
            tail = max(int(window / 2 / low) - head, 0)
        p = compactor.plan(s.history, tail, s.cursor.current_prompt, compactor.message_tokens)
        if p is None:
            return False
        summary = self.summarise(p)
        if isinstance(summary, Ending):
            return summary
        text, how = summary
        new = compactor.compacted(p, text, turn)
        after = self.fixed + sum(compactor.message_tokens(m) for m in new)
        s.compactions += 1
        self.channel.checkpoint(0, [m.to_json() for m in new], [], turn, s.fields())
        s.history[:] = new
        self.baseline = Baseline(after, len(new))
        self.events.emit(
            ContextCompacted(
                sessionId=self.session_id,
                turnId=turn,
                beforeTokens=before,
                afterTokens=after,
                turnsSummarized=p.turns,
                summary=how,
            )
        )
        return True

    def summarise(self, p: compactor.Plan) -> tuple[str, Literal["model", "digest"]] | Ending:
        """(summary, "model") from one tool-less call, or (digest, "digest") if it fails."""
        window = self.settings.context_tokens
        max_tokens = min(4096, max(window // SUMMARY_SHARE, 256))
        request = compactor.summary_request(p, window * compactor.CHARS_PER_TOKEN // 2, max_tokens)
        try:
            reply = self.calls.once(request)
        except ModelError as exc:
            log.warning("session %s: the summary call failed (%s); a digest instead", self.session_id, exc)
            return compactor.digest(p, max_tokens * compactor.CHARS_PER_TOKEN), "digest"
        if isinstance(reply, Ending):
            return reply
        self.s.usage = self.s.usage + reply.usage
        text = "\n\n".join(t for t in reply.message().texts if t.strip())
        if not text:
            return compactor.digest(p, max_tokens * compactor.CHARS_PER_TOKEN), "digest"
        return text, "model"


def overflow(detail: str) -> Ending:
    return Ending(SessionStatus.FAILED, "context_overflow", detail)
