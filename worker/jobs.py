"""The RQ job: `run_session(session_id)` runs one agent session to its end on this worker.

Dispatch enqueues it by its dotted name (`worker.jobs.run_session`, job id = session id);
a resume job runs the same function. The job builds its own Redis connections (the bus's,
and one for the lease heartbeat thread), the model, the sinks and the catalog, then hands
over to `daemon.runner.run_session`. SIGTERM in the work horse asks the session to stop at
its next turn boundary: the turn is checkpointed, the lease released and the session's next
job enqueued, so another worker carries on where this one stopped. An attempt the bus
fenced off writes nothing more: the events it held for its last turn are dropped.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

import redis

from daemon.agent import IDLE_SLICE_SECONDS
from daemon.bus import SessionChannel, SteerBus
from daemon.config import Settings, load_settings
from daemon.events import EventSink
from daemon.ids import require_session_id
from daemon.interruptlistener import InterruptListener
from daemon.issues import IssueSink
from daemon.keys import Keys
from daemon.model import AnthropicModel, Model, make_client
from daemon.modelcall import CallSettings
from daemon.modelslots import ModelSlots
from daemon.redisconn import WORKER_PATIENCE_SECONDS, connect
from daemon.registry import SessionRegistry
from daemon.runner import WorkerServices
from daemon.runner import run_session as run_attempt
from daemon.turnevents import TurnBatchingSink
from daemon.workflows import WorkflowLimits, load_catalog
from worker.lease import heartbeat_for
from worker.logcontext import session_context
from worker.queueing import SessionJobQueue

if TYPE_CHECKING:
    from worker.shared import SharedServices

log = logging.getLogger(__name__)


def new_worker_id() -> str:
    """Host, process and a random part: two jobs never share an id, even in one process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def model_factory(settings: Settings) -> Callable[[WorkflowLimits], Model]:
    """Models of one SDK client: built once, shared by every session it serves."""
    client = make_client(settings.anthropic_api_key, settings.anthropic_base_url)

    def make(limits: WorkflowLimits) -> Model:
        return AnthropicModel(settings.model, stall_seconds=limits.stallSeconds, client=client)

    return make


def call_settings(settings: Settings, client: redis.Redis, keys: Keys, wake: threading.Event) -> CallSettings:
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
    )


def build_services(
    settings: Settings, client: redis.Redis, worker_id: str, wake: threading.Event | None = None
) -> WorkerServices:
    keys = Keys(settings.redis_prefix)
    bus = SteerBus(client, keys, retention_seconds=settings.retention_seconds)
    catalog = load_catalog(settings.workflows_dir)

    @contextmanager
    def keep_lease(channel: SessionChannel) -> Iterator[object]:
        # The heartbeat gets a connection of its own: the loop's may be blocked in a call.
        # Fail-fast: during an outage each beat fails at once and the next one tries again.
        own = connect(settings.redis_url_or_default)
        try:
            with heartbeat_for(channel.using(own), settings.lease_seconds) as heartbeat:
                yield heartbeat
        finally:
            own.close()

    def enqueue_job(session_id: str, number: int) -> None:
        url = settings.redis_url_or_default
        rq_client = connect(url, decode=False, patience_seconds=WORKER_PATIENCE_SECONDS)
        SessionJobQueue(rq_client, client, keys, catalog).enqueue(session_id, number)

    return WorkerServices(
        bus=bus,
        registry=SessionRegistry(client, keys),
        events=TurnBatchingSink(EventSink(client, keys, settings.data_dir)),
        issues=IssueSink(client, keys, settings.data_dir),
        catalog=catalog,
        make_model=model_factory(settings),
        worker_id=worker_id,
        lease_seconds=settings.lease_seconds,
        idle_wait_seconds=settings.idle_wait_seconds,
        soul_file=settings.soul_file,
        keep_lease=keep_lease,
        enqueue_job=enqueue_job,
        calls=call_settings(settings, client, keys, wake or threading.Event()),
        # one per process (a fail-fast connection of its own, subscribed); started by the job
        interrupts=InterruptListener(lambda: connect(settings.redis_url_or_default), keys),
    )


@contextmanager
def stop_on_sigterm(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """SIGTERM sets the event (the loop stops at its next turn boundary, a wait at once);
    the previous handler is restored after."""
    stop = stop or threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        log.warning("SIGTERM: stopping the session at its next turn boundary")
        stop.set()

    previous: Any = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


_SHARED: SharedServices | None = None  # set by a worker running its jobs in threads


def use_shared(shared: SharedServices | None) -> None:
    """This process runs many sessions at once: their jobs use `shared` (worker/threaded.py)."""
    global _SHARED
    _SHARED = shared


def run_session(session_id: str) -> str:
    """The RQ job. Returns the attempt's outcome word (stored as the job's result)."""
    require_session_id(session_id)
    with session_context(session_id):
        shared = _SHARED
        if shared is not None:
            return run_with(session_id, shared.services(new_worker_id()), shared.stop)
        return run_alone(session_id)


def run_with(session_id: str, services: WorkerServices, stop: threading.Event) -> str:
    """One attempt on services a process shares with its other sessions."""
    outcome = "error"
    try:
        outcome = run_attempt(session_id, services, stop.is_set)
    finally:
        # held events of the last turn (a release, an error) — but a fenced attempt's stay
        # unwritten: another attempt owns the session's story now
        if isinstance(services.events, TurnBatchingSink) and outcome != "fenced":
            services.events.flush()
    return outcome


def run_alone(session_id: str) -> str:
    """One attempt in a work horse of its own (`--concurrency 1`): its own connections."""
    settings = load_settings()
    # The idle wait blocks in BLMOVE slices: the socket timeout must outlast one.
    # Patient: the session rides out a Redis restart (each worker-side script is safe to re-run)
    client = connect(
        settings.redis_url_or_default,
        socket_timeout=max(10.0, IDLE_SLICE_SECONDS + 5),
        patience_seconds=WORKER_PATIENCE_SECONDS,
    )
    worker_id = new_worker_id()
    stop = threading.Event()  # SIGTERM: also wakes a retry's backoff or a wait for a model slot
    services = build_services(settings, client, worker_id, wake=stop)
    if services.interrupts is not None:
        services.interrupts.start()
    try:
        with stop_on_sigterm(stop):
            return run_with(session_id, services, stop)
    finally:
        if services.interrupts is not None:
            services.interrupts.stop()
        if services.calls.slots is not None:
            services.calls.slots.close()
