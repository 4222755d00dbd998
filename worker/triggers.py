"""The worker tier's trigger loops (README's Triggers): polls and queued events, in the pool's
parent process next to the reaper (one set per `worktrain worker`; the leases in Redis make
one process per trigger do the work fleet-wide). A fire dispatches through the same path as
`POST /api/v2/auto/dispatch` (daemon/triggers/firing.py).
"""

from __future__ import annotations

from daemon.bus.fleet.metrics import MetricsRecorder
from daemon.bus.keys import Keys
from daemon.bus.session.dispatch import RqJobQueue
from daemon.bus.session.steerbus import SteerBus
from daemon.host import secrets
from daemon.host.config import Settings
from daemon.host.redisconn import connect
from daemon.triggers.loading import TriggerSet
from daemon.triggers.runner import TriggerRunner
from daemon.triggers.setup import build_firing
from daemon.workflows import Catalog

SOCKET_TIMEOUT = 10.0


def start_triggers(settings: Settings, triggers: TriggerSet, catalog: Catalog) -> TriggerRunner | None:
    """The loops of the triggers that have background work (None: none has)."""
    if not any(t.spec.mode == "poll" or t.spec.whileRunning == "queue" for t in triggers):
        return None
    url = settings.redis_url_or_default
    client = connect(url, socket_timeout=SOCKET_TIMEOUT)
    keys = Keys(settings.redis_prefix)
    metrics = MetricsRecorder(client, keys)
    jobs = RqJobQueue(connect(url, decode=False, socket_timeout=SOCKET_TIMEOUT))
    bus = SteerBus(client, keys, retention_seconds=settings.retention_seconds)
    firing = build_firing(settings, bus, jobs, catalog, metrics)
    lease_ms = int(settings.lease_seconds * 1000)
    return TriggerRunner(triggers, firing.store, firing, secrets.value, lease_ms, metrics).start()
