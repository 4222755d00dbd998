"""The worker process's webhook sender (README's Webhooks, daemon/webhooks/sender.py).

Every RQ worker process (threaded or forking) runs one, next to its sessions but on threads
of its own: any worker sends any session's deliveries, and a slow receiver never holds a
session. Its Redis connection is its own (fail-fast: a failed tick is retried at the next).
"""

from __future__ import annotations

from daemon.bus.events import EventSink
from daemon.bus.keys import Keys
from daemon.bus.metrics import MetricsRecorder
from daemon.bus.webhookpayloads import RetryPolicy, WebhookRouting
from daemon.bus.webhooks import WebhookOutbox
from daemon.host.config import Settings
from daemon.host.redisconn import connect
from daemon.webhooks.sender import WebhookSender

SENDER_SOCKET_TIMEOUT = 5.0


def webhook_routing(settings: Settings) -> WebhookRouting:
    return WebhookRouting.of(settings.webhook_urls, settings.url)


def retry_policy(settings: Settings) -> RetryPolicy:
    return RetryPolicy(
        base_seconds=settings.webhook_backoff_seconds,
        max_seconds=settings.webhook_backoff_max_seconds,
        give_up_seconds=settings.webhook_give_up_seconds,
        timeout_seconds=settings.webhook_timeout_seconds,
    )


class ProcessSender:
    """The sender and what it owns (its connection, its metrics recorder)."""

    def __init__(self, settings: Settings) -> None:
        keys = Keys(settings.redis_prefix)
        client = connect(settings.redis_url_or_default, socket_timeout=SENDER_SOCKET_TIMEOUT)
        self.metrics = MetricsRecorder(client, keys)
        outbox = WebhookOutbox(client, keys, webhook_routing(settings), settings.retention_seconds)
        self.sender = WebhookSender(
            outbox,
            EventSink(client, keys, settings.data_dir),
            retry_policy(settings),
            secret=settings.webhook_secret,
            metrics=self.metrics,
            receivers=settings.webhook_receivers,
        ).start()

    def close(self) -> None:
        self.sender.stop()
        self.metrics.close()
