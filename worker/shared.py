"""What the sessions of one worker process share (`--concurrency` > 1, worker/threaded.py).

Built once per process, after the fork, and handed to every session job it runs:

- one bounded Redis pool for the sessions' bus calls (`pool_size(concurrency)`): a session
  holds a connection only for one command, never while it waits;
- one lease heartbeat loop and one idle waiter (daemon/session/sessionhub.py), each on a connection
  of its own: an idle session costs no connection and no round trip of its own;
- one Anthropic SDK client (one HTTP connection pool), one model-slot semaphore (one keeper
  and one listener thread), one workflow catalog;
- one metrics recorder (daemon/bus/fleet/metrics.py), flushed to Redis once a second;
- one event writer (daemon/bus/session/eventwriter.py): the events no script of their session carried
  (each session's own stream, fenced emit.lua), one pipelined round trip per 50 ms for all;
- one event mirror (daemon/bus/streams/mirror.py): the sessions' copies of their events into
  `wt:events` and the JSONL file, one pipeline and one append per 250 ms for all of them;
- one stop event: a warm shutdown sets it, and every session stops at its next turn
  boundary (a retry's backoff or a wait for a model slot at once) and hands itself over.

What stays per session: its channel and fence, its event batching, its tools.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis

from daemon.agent.model import AnthropicModel, Model, RealApiForbidden, make_client
from daemon.agent.modelcall import CallSettings
from daemon.bus.fleet.metrics import NULL_RECORDER, MetricsRecorder
from daemon.bus.fleet.modelslots import ModelSlots
from daemon.bus.keys import Keys
from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.replication import Replication
from daemon.bus.session.dispatch import Dispatcher, RqJobQueue
from daemon.bus.session.eventwriter import EventWriter
from daemon.bus.session.interruptlistener import InterruptListener
from daemon.bus.session.journalwaiter import SLICE_SECONDS, JournalWaiter
from daemon.bus.session.leasebeats import LeaseBeats
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.signals import SignalStream
from daemon.bus.session.spawns import SessionTree
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.bus.streams.issues import IssueSink
from daemon.bus.streams.mirror import EventMirror, MirroredSink
from daemon.host import tracing
from daemon.host.config import Settings
from daemon.host.redisconn import WORKER_PATIENCE_SECONDS, connect
from daemon.session.runner import WorkerServices
from daemon.session.sessionhub import SessionHub
from daemon.session.subagents import FleetServices
from daemon.workflows import WorkflowLimits, load_catalog
from daemon.workflows.agentconfig import AgentConfig
from daemon.workspaces.delivery import DeliverySettings
from worker.queueing import SessionJobQueue
from worker.webhooks import webhook_routing

SOCKET_TIMEOUT_SECONDS = 10.0
# How long the process's event mirror gathers its sessions' copies for wt:events and the JSONL
# file: each round is a pipeline and a file append whatever it carries, so at a few turns a
# second per process 50 ms rounds carried one turn's events each (docs/benchmarks.md section 17)
MIRROR_LINGER_SECONDS = 0.25


class ModelUnavailable(RuntimeError):
    """The model's SDK client cannot be built with this environment (a provider's region)."""


class ModelFactory:
    """Models of one SDK client (built once, shared by every session it serves), each with
    its session's agentConfig (docs/DEVELOPING.md): the record's, resolved at dispatch; a field it
    lacks (a record from before agentConfig) from this worker's environment."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = make_client(
            settings.anthropic_api_key, settings.anthropic_base_url, settings.model_provider
        )
        self.defaults = AgentConfig(
            model=settings.model,
            maxOutputTokens=settings.max_output_tokens,
            thinkingBudgetTokens=settings.thinking_budget,
        )

    def model(self, limits: WorkflowLimits, config: AgentConfig | None = None) -> Model:
        resolved = (config or AgentConfig()).over(self.defaults)
        assert resolved.model is not None and resolved.maxOutputTokens is not None
        return AnthropicModel(
            resolved.model,
            stall_seconds=limits.stallSeconds,
            client=self.client,
            max_tokens=resolved.maxOutputTokens,
            thinking_budget=resolved.thinkingBudgetTokens or 0,
        )

    def for_session(
        self, registry: SessionRegistry, session_id: str | None
    ) -> Callable[[WorkflowLimits], Model]:
        """What the runner calls once per attempt, after its claim: the record read then."""

        def make(limits: WorkflowLimits) -> Model:
            record = registry.get(session_id) if session_id is not None else None
            return self.model(limits, record.agentConfig if record is not None else None)

        return make


def check_model_client(settings: Settings) -> None:
    """Build the model's client once in the pool's process, before any RQ worker is forked:
    a setting the SDK refuses (Bedrock or Vertex without a region, the real API under
    WORKTRAIN_FORBID_REAL_API) stops `worktrain worker` with that sentence, where each forked
    worker would otherwise fail as it starts and RQ's pool fork another every second."""
    try:
        client = ModelFactory(settings).client
    except (ValueError, RealApiForbidden) as exc:  # the SDK's ValueError names what is missing
        raise ModelUnavailable(
            f"the model client (WORKTRAIN_MODEL_PROVIDER={settings.model_provider}) cannot be built: {exc}"
        ) from exc
    client.close()  # its HTTP pool is not carried into the forks


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
    """Connections for C sessions, plus the model-slot listener's. A session holds one only
    for a command, but that is ~0.1-1 ms only while the process is quiet: when a burst of
    turn ends queues its threads for the GIL, a thread holds its connection until it wins the
    GIL back to read the reply. With 32 for 125 sessions, session threads spent 18 % of their
    wall time waiting for a connection (py-spy --idle, docs/benchmarks.md section 13). The
    pool opens connections only when they are asked for, so the cap costs nothing idle."""
    return min(concurrency, 128) + 2


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
        self.models = ModelFactory(settings)
        self.stop = threading.Event()
        # the process's fleet metrics (docs/operations.md): counted in memory, flushed once a second
        self.metrics = MetricsRecorder(self.client, self.keys)
        self.mirror = EventMirror(self.client, self.keys, settings.data_dir, MIRROR_LINGER_SECONDS)
        self.writer = EventWriter(self.client)  # the events no script of their session carried
        self.calls = call_settings(settings, self.client, self.keys, self.stop, self.metrics)
        # The beats are fail-fast (a failed tick is retried at the next); the waiter's read
        # blocks for a slice, so its socket timeout outlasts one.
        beats = LeaseBeats(self.bus, connect(url), settings.lease_seconds)
        waiter_client = connect(
            url, socket_timeout=SLICE_SECONDS + 5, patience_seconds=WORKER_PATIENCE_SECONDS
        ).client()  # type: ignore[no-untyped-call]
        self.hub = SessionHub(beats, JournalWaiter(waiter_client, self.client))
        self.queue = SessionJobQueue(self.rq_client, self.client, self.keys, self.catalog)
        # one subscribed connection for the interrupt steers of every session (README's Managing steers)
        self.interrupts = InterruptListener(lambda: connect(url), self.keys).start()
        self.fleet = self._fleet(settings)
        # a running attempt's webhook-bearing events queue their POSTs with them (README's Webhooks)
        self.webhooks = WebhookOutbox(
            self.client, self.keys, webhook_routing(settings), settings.retention_seconds
        )

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

    def services(self, worker_id: str, session_id: str | None = None) -> WorkerServices:
        """One session attempt's services: the shared parts and its own sinks and tools
        (its model: the session's agentConfig)."""
        return WorkerServices(
            bus=self.bus,
            registry=self.registry,
            events=MirroredSink(self.mirror, webhooks=self.webhooks),
            event_writer=self.writer,
            issues=IssueSink(self.client, self.keys, self.settings.data_dir),
            catalog=self.catalog,
            make_model=self.models.for_session(self.registry, session_id),
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
                self.settings.git_author,
                self.settings.git_remote,
                self.settings.delivery_command,
                push_config=self.settings.git_push_config,
            ),
        )

    def close(self) -> None:
        self.writer.close()
        self.mirror.flush()
        self.metrics.close()
        self.interrupts.stop()
        self.hub.close()
        if self.calls.slots is not None:
            self.calls.slots.close()
