"""Fleet metrics kept in Redis (docs/operations.md): what every process counts, recorded cheaply and
read back by the one scrape target (`GET /metrics`, web/metrics.py, through
daemon/bus/fleet/metricsread.py).

Why Redis and not a port per process: workers run on many hosts, come and go, and a web
restart must lose nothing. So each process adds its counts into one Redis hash
(`Keys.metrics`) and the web tier renders that hash at scrape time: totals belong to the
fleet, not to a process.

Why it costs little: recording is an in-memory add under a lock (no I/O on the caller's
path); one daemon thread per process moves what was counted into Redis every
`FLUSH_SECONDS` with ONE pipeline (HINCRBY / HINCRBYFLOAT per touched field), whatever the
event rate. A flush that fails keeps its deltas for the next one, so the totals stay exact
across a Redis blip; a process killed with SIGKILL loses at most its last second of counts.
A worker process adds its presence beat (daemon/bus/fleet/workers.py) to the same pipeline
(`on_flush`). Fork-safe like the event mirror: the thread starts lazily in the process
that records.

Layout of the hash (field -> value), one field per label set:
- counter: `<name>|<labels>` -> integer, `<labels>` = `k=v,k=v` in the metric's label order;
- histogram: `<name>|<labels>|<upper bound>` -> the count of observations in that bucket
  (not cumulative: the reader sums), `<name>|<labels>|sum`, `<name>|<labels>|count`.
Besides it: `Keys.metrics_inflight` (hash: process -> `<model calls in flight> <expiry ms>`)
and `Keys.metrics_steer_rate(bucket)` (accepted steers per 10 s bucket, expiring) for the
console's steers/min. Label values come from bounded sets (never a session id).
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import redis

from daemon.bus.keys import Keys

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
CLOSE_SECONDS = 2.0  # the longest a stopping process waits for its last flush
INFLIGHT_TTL_MS = 15_000  # a process that stops flushing stops counting as in flight after this
RATE_BUCKET_SECONDS = 10
RATE_WINDOW_SECONDS = 60

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
ACCEPT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Literal["counter", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    scale: float = 1.0  # a counter kept in integer units (micro-dollars) is served times this


STEERS = Metric(
    "worktrain_steers_total",
    "counter",
    "Steer requests by outcome (accepted, duplicate, stale_turn, no_live_turn, too_large, "
    "too_many_pending, reuse, not_found), and steers retracted or edited.",
    ("outcome",),
)
STEER_ACCEPT = Metric(
    "worktrain_steer_accept_seconds",
    "histogram",
    "Time the web tier spends accepting a steer (parse, check, the accept script).",
    buckets=ACCEPT_BUCKETS,
)
STEER_DELIVERY = Metric(
    "worktrain_steer_delivery_seconds",
    "histogram",
    "From a steer's acceptance to the model request that carried it.",
    buckets=LATENCY_BUCKETS,
)
MODEL_CALLS = Metric(
    "worktrain_model_calls_total",
    "counter",
    "Model calls by result: ok, api_error (an HTTP error answer), error (no answer), interrupted.",
    ("result",),
)
MODEL_CALL_SECONDS = Metric(
    "worktrain_model_call_seconds", "histogram", "Duration of one model call.", buckets=MODEL_BUCKETS
)
MODEL_RETRIES = Metric(
    "worktrain_model_retries_total",
    "counter",
    "Model calls retried, by the failed call's HTTP status (or connection / timeout).",
    ("status",),
)
TOKENS = Metric(
    "worktrain_tokens_total",
    "counter",
    "Tokens reported by the model API: input, output, cache_read, cache_write.",
    ("kind",),
)
COST = Metric(
    "worktrain_cost_usd_total",
    "counter",
    "What the model calls cost, by model, at the price table's rates (daemon/agent/prices.json); "
    "calls to a model the table does not know are not counted.",
    ("model",),
    scale=1e-6,  # counted in micro-dollars: the recorder's counters are integers
)
TOOL_CALLS = Metric(
    "worktrain_tool_calls_total", "counter", "Tool calls by tool and result (ok, error).", ("tool", "result")
)
FENCED = Metric(
    "worktrain_fenced_total", "counter", "Session attempts stopped because another attempt owns the session."
)
WEBHOOK_DELIVERIES = Metric(
    "worktrain_webhook_deliveries_total",
    "counter",
    "Webhook POST tries by event (session.finished, session.question, session.delivered, "
    "issue.reported, session.forked) and result: delivered (2xx), retry (non-2xx, timeout, "
    "refused), failed (given up after 24 h: webhook_failed).",
    ("event", "result"),
)
WEBHOOK_LATENCY = Metric(
    "worktrain_webhook_delivery_seconds",
    "histogram",
    "From a webhook's event to the receiver's 2xx (retries included).",
    buckets=LATENCY_BUCKETS,
)
TRIGGER_FIRES = Metric(
    "worktrain_trigger_fires_total",
    "counter",
    "Events a trigger judged (README's Triggers), by trigger and result: started (a session), "
    "steered, queued, ignored (not an event it takes, or whileRunning: ignore), duplicate (a "
    "redelivery), error.",
    ("trigger", "result"),
)
TRIGGER_POLLS = Metric(
    "worktrain_trigger_polls_total",
    "counter",
    "Polls by trigger and result: changed (items read), not_modified (304 on every listing), "
    "error (a 5xx, a timeout, a refused connection), rate_limited (no request until the reset).",
    ("trigger", "result"),
)
TRIGGER_REQUESTS = Metric(
    "worktrain_trigger_requests_total",
    "counter",
    "HTTP requests pollers made to a provider's API, by trigger and status (200, 304, 4xx, 5xx, "
    "error: no answer). A 304 costs no GitHub rate limit.",
    ("trigger", "status"),
)

RECORDED: tuple[Metric, ...] = (
    STEERS,
    STEER_ACCEPT,
    STEER_DELIVERY,
    MODEL_CALLS,
    MODEL_CALL_SECONDS,
    MODEL_RETRIES,
    TOKENS,
    COST,
    TOOL_CALLS,
    FENCED,
    WEBHOOK_DELIVERIES,
    WEBHOOK_LATENCY,
    TRIGGER_FIRES,
    TRIGGER_POLLS,
    TRIGGER_REQUESTS,
)
BY_NAME = {metric.name: metric for metric in RECORDED}
# Per histogram: the field suffix of each bucket, +Inf last (bucket_bound's bisect indexes it).
_BOUNDS = {m.name: (*(f"|{b!r}" for b in m.buckets), "|+Inf") for m in RECORDED if m.kind == "histogram"}

STEER_OUTCOMES = frozenset(
    {
        "accepted",
        "duplicate",
        "stale_turn",
        "no_live_turn",
        "too_large",
        "too_many_pending",
        "reuse",
        "not_found",
        "retracted",
        "edited",
    }
)
RETRY_STATUSES = frozenset({"408", "409", "429", "500", "502", "503", "504", "529"})
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


def _clean(value: str) -> str:
    """A label value that cannot break the field layout."""
    return value.replace("|", "_").replace(",", "_").replace("=", "_")[:64]


def label_key(metric: Metric, labels: Mapping[str, str]) -> str:
    return ",".join(f"{name}={_clean(labels.get(name, ''))}" for name in metric.labels)


def parse_labels(key: str) -> tuple[tuple[str, str], ...]:
    if not key:
        return ()
    return tuple((name, value) for name, _, value in (part.partition("=") for part in key.split(",")))


def bucket_bound(metric: Metric, value: float) -> str:
    """`|<upper bound>`: the (non-cumulative) bucket `value` falls in, as written in the hash."""
    i = bisect.bisect_left(metric.buckets, value)
    return _BOUNDS[metric.name][i]


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def retry_status(status: int | None, timed_out: bool = False) -> str:
    if status is None:
        return "timeout" if timed_out else "connection"
    text = str(status)
    return text if text in RETRY_STATUSES else "other"


class MetricsRecorder:
    """One per process: counts in memory, flushes to Redis in one pipeline a second."""

    def __init__(
        self, client: redis.Redis, keys: Keys, flush_seconds: float = FLUSH_SECONDS, background: bool = True
    ) -> None:
        """`background=False`: no thread, the owner calls `flush` (tests)."""
        self.client = client
        self.background = background
        self.keys = keys
        self.flush_seconds = flush_seconds
        self.process = process_name()
        self._lock = threading.Lock()
        self._ints: dict[str, int] = {}
        self._floats: dict[str, float] = {}
        self._rate: dict[int, int] = {}
        self._inflight = 0
        self._publishes_inflight = False
        self._fields: dict[tuple[object, ...], str] = {}
        self._pid = -1
        self._closed = False
        self._stop = threading.Event()
        self.on_flush: list[Callable[[Any], None]] = []  # more writes for the same pipeline

    # --- recording (no I/O) -----------------------------------------------------------------

    def _field(self, metric: Metric, labels: dict[str, str]) -> str:
        """The hash field of a metric and label set (cached: the label sets are bounded)."""
        key = (metric.name, *labels.values()) if len(labels) <= 1 else (metric.name, *sorted(labels.items()))
        found = self._fields.get(key)
        if found is None:
            found = self._fields[key] = f"{metric.name}|{label_key(metric, labels)}"
        return found

    def count(self, metric: Metric, amount: int = 1, **labels: str) -> None:
        if amount <= 0:
            return
        if self._pid != os.getpid():
            self._ensure_thread()
        field_name = self._field(metric, labels)
        with self._lock:
            self._ints[field_name] = self._ints.get(field_name, 0) + amount
            if metric is STEERS and labels.get("outcome") == "accepted":
                bucket = int(time.time()) // RATE_BUCKET_SECONDS
                self._rate[bucket] = self._rate.get(bucket, 0) + amount

    def observe(self, metric: Metric, value: float, **labels: str) -> None:
        if self._pid != os.getpid():
            self._ensure_thread()
        value = max(0.0, value)
        base = self._field(metric, labels)
        bound = bucket_bound(metric, value)
        with self._lock:
            ints = self._ints
            ints[base + bound] = ints.get(base + bound, 0) + 1
            ints[base + "|count"] = ints.get(base + "|count", 0) + 1
            self._floats[base + "|sum"] = self._floats.get(base + "|sum", 0.0) + value

    def in_flight(self) -> int:
        """Model calls this process has in flight now."""
        return self._inflight

    @contextmanager
    def model_call(self) -> Iterator[None]:
        """Counts a model call in flight while the block runs (published each flush)."""
        self._ensure_thread()
        with self._lock:
            self._inflight += 1
            self._publishes_inflight = True
        try:
            yield
        finally:
            with self._lock:
                self._inflight -= 1

    # --- flushing -----------------------------------------------------------------------------

    def stage(self, pipe: Any) -> Callable[[bool], None]:
        """Add what was counted since the last flush to `pipe`; call the returned function
        with False if the pipeline failed (the deltas are kept for the next flush)."""
        with self._lock:
            ints, floats, rate = self._ints, self._floats, self._rate
            self._ints, self._floats, self._rate = {}, {}, {}
            inflight, publish = self._inflight, self._publishes_inflight
        for name, amount in ints.items():
            pipe.hincrby(self.keys.metrics, name, amount)
        for name, total in floats.items():
            pipe.hincrbyfloat(self.keys.metrics, name, total)
        for bucket, amount in rate.items():
            key = self.keys.metrics_steer_rate(bucket)
            pipe.incrby(key, amount)
            pipe.expire(key, RATE_WINDOW_SECONDS * 3)
        if publish:
            expiry = int(time.time() * 1000) + INFLIGHT_TTL_MS
            pipe.hset(self.keys.metrics_inflight, self.process, f"{inflight} {expiry}")

        def done(ok: bool) -> None:
            if ok:
                return
            with self._lock:  # put the deltas back: the next flush carries them
                for name, amount in ints.items():
                    self._ints[name] = self._ints.get(name, 0) + amount
                for name, total in floats.items():
                    self._floats[name] = self._floats.get(name, 0.0) + total
                for bucket, amount in rate.items():
                    self._rate[bucket] = self._rate.get(bucket, 0) + amount

        return done

    def flush(self) -> bool:
        """Write what was counted now (the thread does it every second; tests and exit too)."""
        pipe = self.client.pipeline(transaction=False)
        done = self.stage(pipe)
        for extra in list(self.on_flush):
            extra(pipe)
        if not len(pipe):
            return True
        try:
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("metrics not flushed (kept for the next flush): %s", exc)
            done(False)
            return False
        return True

    def close(self) -> None:
        """The last flush (and the in-flight entry removed), within CLOSE_SECONDS: a worker's
        client rides out a Redis outage for a minute, a stopping process must not."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        last = threading.Thread(target=self._last_flush, name="worktrain-metrics-close", daemon=True)
        last.start()
        last.join(CLOSE_SECONDS)
        if last.is_alive():
            log.warning("metrics: the last flush did not finish within %.0f s (Redis away?)", CLOSE_SECONDS)

    def _last_flush(self) -> None:
        self.flush()
        if self._publishes_inflight:
            try:
                self.client.hdel(self.keys.metrics_inflight, self.process)
            except redis.RedisError as exc:
                log.warning("in-flight entry not removed (it expires): %s", exc)

    def start(self) -> MetricsRecorder:
        self._ensure_thread()
        return self

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid() or not self.background:
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            if self._pid != -1:  # forked after counting: those counts are the parent's to flush
                self._ints, self._floats, self._rate, self._inflight = {}, {}, {}, 0
            self._pid = os.getpid()
            self.process = process_name()
            self._stop = threading.Event()
        threading.Thread(target=self._run, name="worktrain-metrics", daemon=True).start()
        atexit.register(self.close)  # an exit without close(): the counts still land (bounded)

    def _run(self) -> None:
        stop = self._stop
        while not stop.wait(self.flush_seconds):
            try:
                self.flush()
            except Exception:  # the thread must outlive any bug in one flush
                log.exception("metrics flush failed")


class NullRecorder(MetricsRecorder):
    """Records nothing (tests and tools that run without a fleet)."""

    def __init__(self) -> None:  # no client, no thread
        self._lock = threading.Lock()
        self._inflight = 0
        self.on_flush = []

    def count(self, metric: Metric, amount: int = 1, **labels: str) -> None:
        return None

    def observe(self, metric: Metric, value: float, **labels: str) -> None:
        return None

    @contextmanager
    def model_call(self) -> Iterator[None]:
        yield

    def flush(self) -> bool:
        return True

    def close(self) -> None:
        return None

    def start(self) -> MetricsRecorder:
        return self


NULL_RECORDER = NullRecorder()
