"""Where the triggers file is, and reading it for a process that starts (README's Triggers).

`WORKTRAIN_TRIGGERS_FILE` names it (then it must exist); otherwise `<data dir>/triggers.yml`
is read when it is there. A process refuses to start on a file with any problem — each
said with the file, the line and the field: `web` checks the webhook secrets it needs,
`worker` the API tokens, `up` and `worktrain triggers --check` both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from daemon.bus.fleet.metrics import NULL_RECORDER, MetricsRecorder
from daemon.bus.fleet.triggers import TriggerStore
from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.session.dispatch import Dispatcher, JobQueue
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.config import Settings
from daemon.host.receiveraddresses import HOW_TO_ALLOW, url_refusal
from daemon.sandbox.roots import Roots
from daemon.schema.webhookpayloads import WebhookRouting
from daemon.triggers.firing import Firing
from daemon.triggers.loading import (
    Problem,
    TriggerFileError,
    TriggerSet,
    check_catalog,
    check_secrets,
    read_triggers,
)
from daemon.triggers.secretnames import triggers_path
from daemon.workflows import Catalog

NEEDS: dict[str, frozenset[str]] = {
    "web": frozenset({"secret"}),
    "worker": frozenset({"token"}),
    "up": frozenset({"secret", "token"}),
    "check": frozenset({"secret", "token"}),
}


def load_triggers(
    settings: Settings, role: str, catalog: Catalog, secret: Callable[[str], str | None]
) -> TriggerSet:
    """The file's triggers, checked for `role`; TriggerFileError lists every problem."""
    path, required = triggers_path(settings.data_dir, settings.triggers_file)
    return check_triggers(read_triggers(path, required), role, catalog.workflows, settings, secret)


def check_triggers(
    triggers: TriggerSet,
    role: str,
    workflows: Iterable[str],
    settings: Settings,
    secret: Callable[[str], str | None],
) -> TriggerSet:
    roots = Roots(settings.data_dir, settings.workspace_roots)
    problems = check_catalog(triggers, workflows, lambda path: roots.refusal(Path(path)))
    problems += check_secrets(triggers, NEEDS[role], secret)
    problems += check_callbacks(triggers, settings)
    if problems and triggers.path is not None:
        raise TriggerFileError(triggers.path, problems)
    return triggers


def check_callbacks(triggers: TriggerSet, settings: Settings) -> list[Problem]:
    """A trigger's `callbackUrl` on an address the webhook receivers' policy refuses, as a
    dispatch's would be (`WORKTRAIN_WEBHOOK_ALLOW_PRIVATE`, `..._ALLOW_NETWORKS`)."""
    problems = []
    for trigger in triggers:
        url = trigger.spec.callbackUrl
        why = None if url is None else url_refusal(url, settings.webhook_receivers)
        if why is not None:
            where = trigger.line_of("callbackUrl")
            problems.append(
                Problem(where, f"{trigger.id}.callbackUrl", f"not allowed: {why} ({HOW_TO_ALLOW})")
            )
    return problems


def build_firing(
    settings: Settings,
    bus: SteerBus,
    jobs: JobQueue,
    catalog: Catalog,
    metrics: MetricsRecorder = NULL_RECORDER,
) -> Firing:
    """A process's Firing (the web's for webhooks, a worker's for polls and queues): the same
    Dispatcher, event sink and webhook outbox a `POST /api/v2/auto/dispatch` goes through."""
    client, keys = bus.client, bus.keys
    outbox = WebhookOutbox(
        client, keys, WebhookRouting.of(settings.webhook_urls, settings.url), settings.retention_seconds
    )
    events = EventSink(client, keys, settings.data_dir, webhooks=outbox)
    dispatcher = Dispatcher(jobs, keys, SessionRegistry(client, keys), events, settings.retention_seconds)
    return Firing(
        TriggerStore(client, keys, settings.retention_seconds),
        dispatcher,
        bus,
        catalog,
        events,
        metrics,
        settings.max_steer_bytes,
        settings.max_pending_steers,
    )
