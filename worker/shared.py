"""What the sessions of one worker process share (`--concurrency` > 1, worker/threaded.py).

Built once per process, after the fork, and handed to every session job it runs:

- one bounded Redis pool for the sessions' bus calls (`pool_size(concurrency)`): a session
  holds a connection only for one command, never while it waits;
- one lease heartbeat loop and one idle waiter (daemon/session/sessionhub.py), each on a connection
  of its own: an idle session costs no connection and no round trip of its own;
- one Anthropic SDK client (one HTTP connection pool), one model-slot semaphore (one keeper
  and one listener thread), one workflow catalog;
- one metrics recorder (daemon/bus/metrics.py), flushed to Redis once a second;
- one stop event: a warm shutdown sets it, and every session stops at its next turn
  boundary (a retry's backoff or a wait for a model slot at once) and hands itself over.

What stays per session: its channel and fence, its event batching, its tools.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis

from daemon.agent.model import AnthropicModel, Model, make_client
from daemon.agent.modelcall import CallSettings
from daemon.agent.turnevents import TurnBatchingSink
from daemon.bus.dispatch import Dispatcher, RqJobQueue
from daemon.bus.events import EventSink
from daemon.bus.interruptlistener import InterruptListener
from daemon.bus.issues import IssueSink
from daemon.bus.keys import Keys
from daemon.bus.leasebeats import LeaseBeats
from daemon.bus.metrics import NULL_RECORDER, MetricsRecorder
from daemon.bus.modelslots import ModelSlots
from daemon.bus.registry import SessionRegistry
from daemon.bus.replication import Replication
from daemon.bus.signals import SignalStream
from daemon.bus.spawns import SessionTree
from daemon.bus.steers import SteerBus
from daemon.bus.steerwaiter import SLICE_SECONDS, SteerWaiter
from daemon.host import tracing
from daemon.host.config import Settings
from daemon.host.redisconn import WORKER_PATIENCE_SECONDS, connect
from daemon.session.runner import WorkerServices
from daemon.session.sessionhub import SessionHub
from daemon.session.subagents import FleetServices
from daemon.workflows import WorkflowLimits, load_catalog
from daemon.workspaces.delivery import DeliverySettings
from worker.queueing import SessionJobQueue

SOCKET_TIMEOUT_SECONDS = 10.0


def model_factory(settings: Settings) -> Callable[[WorkflowLimits], Model]:
    """Models of one SDK client: built once, shared by every session it serves."""
    client = make_client(settings.anthropic_api_key, settings.anthropic_base_url)

    def make(limits: WorkflowLimits) -> Model:
        return AnthropicModel(settings.model, stall_seconds=limits.stallSeconds, client=client)

    return make


def call_settings(
    settings: Settings,
    client: redis.Redis,
    keys: Keys,
    wake: threading.Event,
    metrics: MetricsRecorder = NULL_RECORDER,
) -> CallSettings:
    """Retries, the fleet-wide cap (a slot lives as long as a lease without renewal), the window."""
    slots = None
    if settings.max_model_calls > 0:
        slots = ModelSlots(
            client, keys.model_slots, settings.max_model_calls, ttl_seconds=settings.lease_seconds
        )
    return CallSettings(
        retry_seconds=settings.model_retry_seconds,
        context_tokens=settings.context_tokens,
        compact_at=settings.compact_at,
        slots=slots,
        wake=wake,
        metrics=metrics,
    )


def pool_size(concurrency: int) -> int:
    """Connections for C sessions: a session holds one only for a command (~0.1-1 ms), so
    a few dozen serve hundreds; plus the model-slot listener's."""
    return min(concurrency, 32) + 2


class SharedServices:
    def __init__(self, settings: Settings, concurrency: int) -> None:
        self.settings = settings
        tracing.setup("worktrain-worker")  # with OTEL_EXPORTER_OTLP_ENDPOINT and the otel extra only
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
        self.bus.replication = Replication(
            self.client, self.keys, settings.redis_wait_replicas, settings.redis_wait_ms
        )
        self.registry = SessionRegistry(self.client, self.keys)
        self.catalog = load_catalog(settings.workflows_dir)
        self.make_model = model_factory(settings)
        self.stop = threading.Event()
        # the process's fleet metrics (SPEC §3.9): counted in memory, flushed once a second
        self.metrics = MetricsRecorder(self.client, self.keys)
        self.calls = call_settings(settings, self.client, self.keys, self.stop, self.metrics)
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
        self.fleet = self._fleet(settings)

    def _fleet(self, settings: Settings) -> FleetServices:
        """signal_coordinator's streams and spawn_agent's dispatch (the web tier's path)."""
        sink = EventSink(self.client, self.keys, settings.data_dir)
        jobs = RqJobQueue(self.rq_client)
        return FleetServices(
            dispatcher=Dispatcher(jobs, self.keys, self.registry, sink, self.bus.retention_seconds),
            tree=SessionTree(self.client, self.keys),
            signals=SignalStream(self.client, self.keys, settings.data_dir, self.bus.retention_seconds),
            sink=sink,
            catalog=self.catalog,
            max_spawn_depth=settings.max_spawn_depth,
        )

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
            fleet=self.fleet,
            delivery=DeliverySettings(
                self.settings.git_author, self.settings.git_remote, self.settings.delivery_command
            ),
        )

    def close(self) -> None:
        self.metrics.close()
        self.interrupts.stop()
        self.hub.close()
        if self.calls.slots is not None:
            self.calls.slots.close()
