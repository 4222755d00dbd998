"""An attempt's events, appended only while the attempt may write (docs/durability.md), and
written without a round trip of their own (docs/benchmarks.md section 17).

`AttemptEvents` is the event sink of one running attempt: each batch is appended to the
session's stream by `emit.lua`, which checks the fence like every other worker-side script
(and refuses anything after `session_completed`), so a superseded attempt — cut off from
Redis, frozen, or merely slow — appends nothing, however late its write arrives. Only what
the script accepted goes on to the global stream `wt:events` and to the JSONL mirror. A
refused batch is dropped with one log line, never raised: a tool that emits must not turn
the refusal into a tool error; the attempt's next guard stops it. Past the local lease
deadline the batch first waits for a heartbeat to confirm the lease (`SessionChannel.guard`).

With the process's `EventWriter` (daemon/bus/session/eventwriter.py), emitting queues the batch: it
rides, in the same pipelined round trip, with the attempt's next worker-side script
(`carry`: the channel's `riders`), or the writer sends it within `LINGER_SECONDS` with every
other session's of the process when no script comes first (the loop waits on a tool). The
two events the loop emits right before it waits on the model — `turn_started`, and the
receipt `steer_delivered` — are appended by the very script whose outcome they announce
(turn_started.lua, request_sent.lua: `SessionChannel.announcing`), and skipped here when the
loop emits them. A session's events therefore keep their order and reach its stream before any later
change of its own (the drain that clears a receipt, the finish), and a turn costs no emit
round trip. The closing batch (`session_completed`) is written at once, after what is
queued. Without a writer (tests, other emitters), each batch is written at once.

Webhooks (README's Webhooks): a batch holding a webhook-bearing event (the sink's `webhooks`)
carries its deliveries into the same emit.lua run, so they are queued exactly when the
event is appended: never for a refused attempt, never twice for one `session_completed`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import redis

from daemon.bus.scriptpipe import ScriptCall, run_calls
from daemon.bus.scripts import EMIT
from daemon.bus.session.fencing import Fenced, LeaseUnconfirmed
from daemon.bus.session.steerbus import SessionChannel
from daemon.bus.streams.eventsink import EventSink
from daemon.schema.events import EventBase, SessionCompleted

log = logging.getLogger(__name__)

T = TypeVar("T")


class Writer(Protocol):
    """The process's writer (daemon.bus.session.eventwriter.EventWriter): takes an attempt's queue
    when no script of its session comes first."""

    def notice(self, attempt: AttemptEvents) -> None: ...


@dataclass(frozen=True)
class EventBatch:
    """One emit.lua run's worth: event JSON lines, and the webhook deliveries they queue."""

    lines: tuple[str, ...]
    webhooks: str = ""  # emit.lua's ARGV[4]
    webhook_keys: tuple[str, ...] = ()  # its KEYS[9..12]


def merged(batches: Sequence[EventBatch]) -> list[EventBatch]:
    """Consecutive batches without webhooks as one (a batch with some runs on its own)."""
    out: list[EventBatch] = []
    for batch in batches:
        if out and not batch.webhooks and not out[-1].webhooks:
            out[-1] = EventBatch(out[-1].lines + batch.lines)
        else:
            out.append(batch)
    return out


class AttemptEvents:
    """The Emitter of one attempt: fenced appends to its session's stream, then the rest."""

    def __init__(self, sink: EventSink, channel: SessionChannel, writer: Writer | None = None) -> None:
        self.sink = sink
        self.channel = channel
        self.writer = writer
        self._queued: list[EventBatch] = []
        self._in_stream: list[EventBase] = []  # appended by a script itself (`appended`)
        self._queue_lock = threading.Lock()
        # held while this attempt's events are being sent, by whichever thread: their order
        self.sending = threading.RLock()
        if writer is not None:
            channel.riders = self

    def emit(self, *events: EventBase) -> None:
        events = self._not_in_stream(events)
        if not events:
            return
        channel = self.channel
        fence = channel.fence
        if fence is not None and fence.refused is not None:
            log.info("session %s: %d event(s) of a refused attempt dropped", channel.session_id, len(events))
            return
        try:
            channel.guard()  # past the local deadline: a heartbeat confirms the lease first
            webhooks, webhook_keys = "", tuple[str, ...]()
            if self.sink.webhooks is not None:
                webhooks, webhook_keys = self.sink.webhooks.queue_for(channel.session_id, events)
        except Fenced as refused:
            log.info("%s: %d event(s) dropped", refused, len(events))
            return
        except (LeaseUnconfirmed, redis.RedisError) as exc:
            log.warning("session %s: %d event(s) not written: %s", channel.session_id, len(events), exc)
            return
        batch = EventBatch(tuple(event.model_dump_json() for event in events), webhooks, webhook_keys)
        with self._queue_lock:
            self._queued.append(batch)
        if self.writer is None or any(isinstance(event, SessionCompleted) for event in events):
            self.flush()
        else:
            self.writer.notice(self)

    def announcement(self, event: EventBase | None) -> str:
        return event.model_dump_json() if event is not None else ""

    def appended(self, event: EventBase, line: str) -> None:
        """A script of the attempt appended `event` itself (SessionChannel.announcing): mirrored
        now, and not written again when the loop emits it."""
        with self._queue_lock:
            self._in_stream.append(event)
        self.sink.write_lines([line])

    def _not_in_stream(self, events: Sequence[EventBase]) -> tuple[EventBase, ...]:
        if not self._in_stream:
            return tuple(events)
        with self._queue_lock:
            written = [e for e in events if any(e is done for done in self._in_stream)]
            self._in_stream = [done for done in self._in_stream if not any(done is e for e in written)]
        return tuple(e for e in events if not any(e is done for done in written))

    @property
    def queued(self) -> bool:
        return bool(self._queued)

    def take(self) -> list[EventBatch]:
        """What is queued, merged (the caller holds `sending` until it has been sent)."""
        with self._queue_lock:
            queued, self._queued = self._queued, []
        return merged(queued)

    def discard(self) -> int:
        """Drop what is queued (a fenced attempt's: another attempt owns the session's story)."""
        with self._queue_lock:
            dropped, self._queued = self._queued, []
        return sum(len(batch.lines) for batch in dropped)

    def flush(self) -> None:
        """Write what is queued now, on this thread (the job's end, the closing batch)."""
        with self.sending:
            batches = self.take()
            if not batches:
                return
            channel, fence = self.channel, self.channel.fence
            lines = sum(len(batch.lines) for batch in batches)
            if fence is None or fence.refused is not None:
                log.info("session %s: %d event(s) of a refused attempt dropped", channel.session_id, lines)
                return
            sent_at = fence.now()
            try:
                replies = replicated(
                    channel, lambda: run_calls(channel.client, channel.bus.scripts, self.calls(batches))
                )
            except redis.RedisError as exc:
                log.warning("session %s: %d event(s) not written: %s", channel.session_id, lines, exc)
                return
            self.answered(batches, replies, sent_at)

    def calls(self, batches: Sequence[EventBatch]) -> list[ScriptCall]:
        """The emit.lua runs that append `batches` (for a pipeline)."""
        channel = self.channel
        keys = channel.keys.all()
        return [
            ScriptCall(EMIT, [*keys, *batch.webhook_keys], channel.fenced_args(batch.webhooks, *batch.lines))
            for batch in batches
        ]

    def answered(self, batches: Sequence[EventBatch], replies: Sequence[Any], sent_at: float) -> None:
        """Read the emit.lua replies to `batches`: refused (the fence records it), failed
        (logged: the events are lost, as a failed write always was), or appended (mirrored)."""
        for batch, reply in zip(batches, replies, strict=True):
            if isinstance(reply, Exception):
                log.warning(
                    "session %s: %d event(s) not written: %s",
                    self.channel.session_id,
                    len(batch.lines),
                    reply,
                )
                continue
            try:
                self.channel.answer(reply, sent_at)
            except Fenced as refused:
                log.info("%s: %d event(s) dropped", refused, len(batch.lines))
                continue
            self.sink.write_lines(batch.lines)

    def carry(self, call: ScriptCall, client: redis.Redis, sent_at: float) -> Any:
        """Run the attempt's worker-side script `call` with what is queued ahead of it, in one
        pipelined round trip (SessionChannel's `riders`); its decoded reply, as `BusScripts.run`
        gives it."""
        with self.sending:
            batches = self.take()
            *appended, reply = run_calls(client, self.channel.bus.scripts, [*self.calls(batches), call])
            self.answered(batches, appended, sent_at)
        if isinstance(reply, Exception):
            raise reply
        return reply


def replicated(channel: SessionChannel, step: Callable[[], T]) -> T:
    """`step` (emit.lua runs), confirmed on the replicas when WAIT is configured, as every
    worker-side change is (daemon/bus/replication.py; a step run again may append an event twice)."""
    replication = channel.bus.replication
    if replication is None or not replication.enabled:
        return step()
    return replication.confirmed(step, lambda: None, "emit.lua")


def flush_events(events: object) -> None:
    """Write what an attempt's emitter holds (`AttemptEvents`; other emitters hold nothing)."""
    if isinstance(events, AttemptEvents):
        events.flush()


def discard_events(events: object) -> None:
    """Drop what a fenced attempt's emitter holds, saying how much."""
    if isinstance(events, AttemptEvents) and (dropped := events.discard()):
        log.info("session %s: %d event(s) of a fenced attempt dropped", events.channel.session_id, dropped)
