"""An attempt's events, appended only while the attempt may write (docs/durability.md).

`AttemptEvents` is the event sink of one running attempt: each batch is appended to the
session's stream by `emit.lua`, which checks the fence like every other worker-side script
(and refuses anything after `session_completed`), so a superseded attempt — cut off from
Redis, frozen, or merely slow — appends nothing, however late its write arrives. Only what
the script accepted goes on to the global stream `wt:events` and to the JSONL mirror. A
refused batch is dropped with one log line, never raised: a tool that emits must not turn
the refusal into a tool error; the attempt's next guard stops it. Past the local lease
deadline the batch first waits for a heartbeat to confirm the lease (`SessionChannel.guard`).

Webhooks (README's Webhooks): a batch holding a webhook-bearing event (the sink's `webhooks`)
carries its deliveries into the same emit.lua run, so they are queued exactly when the
event is appended: never for a refused attempt, never twice for one `session_completed`.
"""

from __future__ import annotations

import logging

import redis

from daemon.bus.events import EventBase, EventSink
from daemon.bus.fencing import Fenced, LeaseUnconfirmed
from daemon.bus.scripts import EMIT
from daemon.bus.steers import SessionChannel

log = logging.getLogger(__name__)


class AttemptEvents:
    """The Emitter of one attempt: fenced appends to its session's stream, then the rest."""

    def __init__(self, sink: EventSink, channel: SessionChannel) -> None:
        self.sink = sink
        self.channel = channel

    def emit(self, *events: EventBase) -> None:
        if not events:
            return
        channel = self.channel
        fence = channel.fence
        if fence is not None and fence.refused is not None:
            log.info("session %s: %d event(s) of a refused attempt dropped", channel.session_id, len(events))
            return
        lines = [event.model_dump_json() for event in events]
        try:
            channel.guard()  # past the local deadline: a heartbeat confirms the lease first
            webhooks, webhook_keys = "", tuple[str, ...]()
            if self.sink.webhooks is not None:
                webhooks, webhook_keys = self.sink.webhooks.queue_for(channel.session_id, events)
            channel.call(EMIT, webhooks, *lines, extra_keys=webhook_keys)
        except Fenced as refused:
            log.info("%s: %d event(s) dropped", refused, len(events))
            return
        except (LeaseUnconfirmed, redis.RedisError) as exc:
            log.warning("session %s: %d event(s) not written: %s", channel.session_id, len(events), exc)
            return
        self.sink.write(events, session_streams=False)  # wt:events and the JSONL mirror
