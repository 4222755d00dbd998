"""The fleet metrics read back (the web tier: `GET /metrics`, the Fleet page): the hash every
process flushes into (daemon/bus/fleet/metrics.py, which documents its layout), the model calls in
flight and the last minute's steers, as one `Snapshot` in two round trips."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import redis

from daemon.bus.fleet.metrics import BY_NAME, RATE_BUCKET_SECONDS, RATE_WINDOW_SECONDS, parse_labels
from daemon.bus.keys import Keys
from daemon.host.redisconn import as_text


@dataclass
class Histogram:
    buckets: list[tuple[float, int]]  # (upper bound, cumulative count), +Inf last
    sum: float
    count: int

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear inside the bucket the rank falls in."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower
                inside = cumulative - below
                share = (rank - below) / inside if inside else 0.0
                return lower + (bound - lower) * share
            lower, below = bound, cumulative
        return lower


@dataclass
class Snapshot:
    counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = field(default_factory=dict)
    histograms: dict[str, dict[tuple[tuple[str, str], ...], Histogram]] = field(default_factory=dict)
    model_calls_in_flight: int = 0
    steers_last_minute: int = 0

    def total(self, name: str, **labels: str) -> float:
        want = set(labels.items())
        return sum(v for key, v in self.counters.get(name, {}).items() if want <= set(key))

    def histogram(self, name: str) -> Histogram:
        merged = self.histograms.get(name, {})
        if not merged:
            metric = BY_NAME[name]
            return Histogram([(b, 0) for b in (*metric.buckets, math.inf)], 0.0, 0)
        return next(iter(merged.values())) if len(merged) == 1 else _merge(list(merged.values()))


def _merge(parts: Sequence[Histogram]) -> Histogram:
    buckets = [(bound, sum(p.buckets[i][1] for p in parts)) for i, (bound, _) in enumerate(parts[0].buckets)]
    return Histogram(buckets, sum(p.sum for p in parts), sum(p.count for p in parts))


def read_snapshot(client: redis.Redis, keys: Keys, now_ms: int | None = None) -> Snapshot:
    """Every recorded metric, fleet-wide, in two round trips."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    bucket_now = now_ms // 1000 // RATE_BUCKET_SECONDS
    rate_buckets = [bucket_now - i for i in range(RATE_WINDOW_SECONDS // RATE_BUCKET_SECONDS)]
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.metrics)
    pipe.hgetall(keys.metrics_inflight)
    pipe.mget([keys.metrics_steer_rate(b) for b in rate_buckets])
    raw, inflight, rates = pipe.execute()
    snapshot = Snapshot()
    _fill(snapshot, {as_text(k): as_text(v) for k, v in raw.items()})
    stale = []
    for process, value in inflight.items():
        count, _, expiry = as_text(value).partition(" ")
        if int(expiry or 0) < now_ms:
            stale.append(process)
        else:
            snapshot.model_calls_in_flight += max(0, int(count))
    if stale:
        client.hdel(keys.metrics_inflight, *stale)  # processes gone without a goodbye
    snapshot.steers_last_minute = sum(int(as_text(r)) for r in rates if r is not None)
    return snapshot


def _fill(snapshot: Snapshot, fields: Mapping[str, str]) -> None:
    parts: dict[tuple[str, str], dict[str, float]] = {}
    for name, value in fields.items():
        pieces = name.split("|")
        metric = BY_NAME.get(pieces[0])
        if metric is None:
            continue
        if metric.kind == "counter" and len(pieces) == 2:
            snapshot.counters.setdefault(metric.name, {})[parse_labels(pieces[1])] = float(value)
        elif metric.kind == "histogram" and len(pieces) == 3:
            parts.setdefault((metric.name, pieces[1]), {})[pieces[2]] = float(value)
    for (name, label_text), values in parts.items():
        metric = BY_NAME[name]
        cumulative, buckets = 0, []
        for bound in (*metric.buckets, math.inf):
            cumulative += int(values.get("+Inf" if math.isinf(bound) else repr(bound), 0))
            buckets.append((bound, cumulative))
        histogram = Histogram(buckets, values.get("sum", 0.0), int(values.get("count", cumulative)))
        snapshot.histograms.setdefault(name, {})[parse_labels(label_text)] = histogram
