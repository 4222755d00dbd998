"""The worker process's webhook sender (README's Webhooks, daemon/webhooks/sender.py).

Every RQ worker process (threaded or forking) runs one, next to its sessions but on threads
of its own: any worker sends any session's deliveries, and a slow receiver never holds a
session. Its Redis connection is its own (fail-fast: a failed tick is retried at the next).
A trigger's report-back comment (README's Triggers) is posted by its `CommentPoster`, with
the token this process holds (the worker's `tokenEnv` variables, daemon/host/secrets.py).
"""

from __future__ import annotations

import logging

import redis

from daemon.bus.fleet.metrics import MetricsRecorder
from daemon.bus.fleet.triggers import TriggerStore
from daemon.bus.keys import Keys
from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.streams.eventsink import EventSink
from daemon.host import secrets
from daemon.host.config import Settings
from daemon.host.redisconn import connect
from daemon.schema.webhookpayloads import COMMENT_TYPE, RetryPolicy, WebhookRouting
from daemon.triggers.loading import TriggerFileError, TriggerSet, read_triggers
from daemon.triggers.reportback import CommentPoster
from daemon.triggers.secretnames import triggers_path
from daemon.webhooks.sender import Poster, WebhookSender

log = logging.getLogger(__name__)

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
            posters=comment_posters(settings, client, keys),
            receivers=settings.webhook_receivers,
        ).start()

    def close(self) -> None:
        self.sender.stop()
        self.metrics.close()


def comment_posters(settings: Settings, client: redis.Redis, keys: Keys) -> dict[str, Poster]:
    """The report-back poster over this worker's triggers file (checked when the worker
    started: a file changed since is read as it is, or, broken, posts nothing here)."""
    path, named = triggers_path(settings.data_dir, settings.triggers_file)
    try:
        triggers = read_triggers(path, named)
    except TriggerFileError as exc:
        log.warning("report-back comments not posted by this process: %s", exc)
        triggers = TriggerSet(path)
    store = TriggerStore(client, keys, settings.retention_seconds)
    return {COMMENT_TYPE: CommentPoster(triggers, store, SessionRegistry(client, keys), secrets.value)}
