"""`GET /metrics` (docs/operations.md): the whole fleet in Prometheus' text format, one scrape target.

A custom `prometheus_client` Collector: at each scrape it reads what every process recorded
into Redis (daemon/bus/fleet/metrics.py) and the fleet's gauges (web/fleet.py `FleetReader`) and
yields metric families; nothing is counted in this process's memory, so every web process
answers the same and a web restart loses nothing. docs/operations.md lists each metric.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from daemon.bus.fleet.history import FleetNumbers
from daemon.bus.fleet.metrics import (
    MODEL_CALLS,
    RECORDED,
    STEER_OUTCOMES,
    STEERS,
    TOKEN_KINDS,
    TOKENS,
    Metric,
)
from web.fleet import FleetReader

# Label values shown at 0 before their first event, so alerts and rates see them at once.
KNOWN: dict[str, list[tuple[str, ...]]] = {
    STEERS.name: [(outcome,) for outcome in sorted(STEER_OUTCOMES)],
    MODEL_CALLS.name: [("ok",), ("api_error",), ("error",), ("interrupted",)],
    TOKENS.name: [(kind,) for kind in TOKEN_KINDS],
}


class FleetCollector(Collector):
    def __init__(self, reader: FleetReader) -> None:
        self.reader = reader

    def describe(self) -> list[Any]:
        return []  # nothing to describe in advance: the families come from Redis at scrape

    def collect(self) -> Iterator[Any]:
        numbers = self.reader.numbers()
        for metric in RECORDED:
            if metric.kind == "counter":
                yield counter_family(metric, numbers)
            else:
                yield histogram_family(metric, numbers)
        yield from gauge_families(numbers)


def counter_family(metric: Metric, numbers: FleetNumbers) -> CounterMetricFamily:
    family = CounterMetricFamily(metric.name, metric.help, labels=list(metric.labels))
    values = {
        tuple(v for _, v in key): value
        for key, value in numbers.snapshot.counters.get(metric.name, {}).items()
    }
    for known in KNOWN.get(metric.name, [] if metric.labels else [()]):
        values.setdefault(known, 0.0)
    for labels, value in sorted(values.items()):
        family.add_metric(list(labels), value * metric.scale)
    return family


def histogram_family(metric: Metric, numbers: FleetNumbers) -> HistogramMetricFamily:
    family = HistogramMetricFamily(metric.name, metric.help, labels=list(metric.labels))
    histograms = numbers.snapshot.histograms.get(metric.name, {})
    if not histograms and not metric.labels:
        histograms = {(): numbers.snapshot.histogram(metric.name)}
    for key, histogram in sorted(histograms.items()):
        buckets = [(_bound(bound), float(count)) for bound, count in histogram.buckets]
        family.add_metric([v for _, v in key], buckets, histogram.sum)
    return family


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def gauge_families(n: FleetNumbers) -> Iterator[GaugeMetricFamily]:
    sessions = GaugeMetricFamily("worktrain_sessions", "Readable sessions by status.", labels=["status"])
    for status, count in sorted(n.sessions.items()):
        sessions.add_metric([status], count)
    yield sessions
    yield GaugeMetricFamily("worktrain_queue_depth", "Jobs waiting on the RQ queue.", value=n.queue_depth)
    yield GaugeMetricFamily("worktrain_workers", "Live worker processes.", value=len(n.workers))
    per_worker = GaugeMetricFamily(
        "worktrain_worker_sessions", "Sessions each live worker process runs.", labels=["worker"]
    )
    for worker in n.workers:
        per_worker.add_metric([worker.id], len(worker.sessions))
    yield per_worker
    yield GaugeMetricFamily(
        "worktrain_model_calls_in_flight",
        "Model calls in flight across the fleet.",
        value=n.model_calls_in_flight,
    )
    yield GaugeMetricFamily(
        "worktrain_model_calls_cap", "WORKTRAIN_MAX_MODEL_CALLS (0: no cap).", value=n.cap
    )


class MetricsRoute:
    """The view of `GET /metrics`: one registry holding the one collector."""

    def __init__(self, reader: FleetReader) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(FleetCollector(reader))

    def metrics(self) -> Response:
        return Response(generate_latest(self.registry), status=200, content_type=CONTENT_TYPE_LATEST)
