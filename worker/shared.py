"""What the sessions of one worker process share (`--concurrency` > 1, worker/threaded.py).

Built once per process, after the fork, and handed to every session job it runs:

- one bounded Redis pool for the sessions' bus calls (`pool_size(concurrency)`): a session
  holds a connection only for one command, never while it waits;
- one lease heartbeat loop and one idle waiter (daemon/sessionhub.py), each on a connection
  of its own: an idle session costs no connection and no round trip of its own;
- one Anthropic SDK client (one HTTP connection pool), one model-slot semaphore (one keeper
  and one listener thread), one workflow catalog;
- one stop event: a warm shutdown sets it, and every session stops at its next turn
  boundary (a retry's backoff or a wait for a model slot at once) and hands itself over.

What stays per session: its channel and fence, its event batching, its tools.
"""

from __future__ import annotations

import threading

from daemon.bus import SteerBus
from daemon.config import Settings
from daemon.events import EventSink
from daemon.interruptlistener import InterruptListener
from daemon.issues import IssueSink
from daemon.keys import Keys
from daemon.leasebeats import LeaseBeats
from daemon.redisconn import WORKER_PATIENCE_SECONDS, connect
from daemon.registry import SessionRegistry
from daemon.runner import WorkerServices
from daemon.sessionhub import SessionHub
from daemon.steerwaiter import SLICE_SECONDS, SteerWaiter
from daemon.turnevents import TurnBatchingSink
from daemon.workflows import load_catalog
from worker.queueing import SessionJobQueue

SOCKET_TIMEOUT_SECONDS = 10.0


def pool_size(concurrency: int) -> int:
    """Connections for C sessions: a session holds one only for a command (~0.1-1 ms), so
    a few dozen serve hundreds; plus the model-slot listener's."""
    return min(concurrency, 32) + 2


class SharedServices:
    def __init__(self, settings: Settings, concurrency: int) -> None:
        from worker.jobs import call_settings, model_factory

        self.settings = settings
        self.keys = Keys(settings.redis_prefix)
        url = settings.redis_url_or_default
        self.client = connect(
            url,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            patience_seconds=WORKER_PATIENCE_SECONDS,
            max_connections=pool_size(concurrency),
        )
        self.rq_client = connect(
            url, decode=False, patience_seconds=WORKER_PATIENCE_SECONDS, max_connections=4
        )
        self.bus = SteerBus(self.client, self.keys, retention_seconds=settings.retention_seconds)
        self.registry = SessionRegistry(self.client, self.keys)
        self.catalog = load_catalog(settings.workflows_dir)
        self.make_model = model_factory(settings)
        self.stop = threading.Event()
        self.calls = call_settings(settings, self.client, self.keys, self.stop)
        # The beats are fail-fast (a failed tick is retried at the next); the waiter's read
        # blocks for a slice, so its socket timeout outlasts one.
        beats = LeaseBeats(self.bus, connect(url), settings.lease_seconds)
        waiter_client = connect(
            url, socket_timeout=SLICE_SECONDS + 5, patience_seconds=WORKER_PATIENCE_SECONDS
        ).client()  # type: ignore[no-untyped-call]
        self.hub = SessionHub(beats, SteerWaiter(waiter_client, self.client))
        self.queue = SessionJobQueue(self.rq_client, self.client, self.keys, self.catalog)
        # one subscribed connection for the interrupt steers of every session (SPEC §3.7)
        self.interrupts = InterruptListener(lambda: connect(url), self.keys).start()

    def services(self, worker_id: str) -> WorkerServices:
        """One session attempt's services: the shared parts and its own sinks and tools."""
        return WorkerServices(
            bus=self.bus,
            registry=self.registry,
            events=TurnBatchingSink(EventSink(self.client, self.keys, self.settings.data_dir)),
            issues=IssueSink(self.client, self.keys, self.settings.data_dir),
            catalog=self.catalog,
            make_model=self.make_model,
            worker_id=worker_id,
            lease_seconds=self.settings.lease_seconds,
            idle_wait_seconds=self.settings.idle_wait_seconds,
            soul_file=self.settings.soul_file,
            keep_lease=self.hub.attend,
            enqueue_job=self.queue.enqueue,
            calls=self.calls,
            interrupts=self.interrupts,
        )

    def close(self) -> None:
        self.interrupts.stop()
        self.hub.close()
        if self.calls.slots is not None:
            self.calls.slots.close()
