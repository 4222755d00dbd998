"""The fleet metrics' recording and reading (daemon/bus/fleet/metrics.py, daemon/bus/fleet/workers.py) and
their exposition (web/metrics.py), on real Redis and fakeredis: every count lands exactly
once, a failed flush keeps its deltas, two processes add up, labels stay bounded, and the
text parses with prometheus_client's own parser."""

from __future__ import annotations

import math
import time

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from daemon.bus.fleet.metrics import (
    MODEL_CALLS,
    STEER_DELIVERY,
    STEERS,
    TOOL_CALLS,
    MetricsRecorder,
    retry_status,
)
from daemon.bus.fleet.metricsread import Histogram, read_snapshot
from daemon.bus.fleet.workers import WorkerPresence, live_workers
from daemon.bus.keys import Keys
from daemon.bus.session.registry import SessionRegistry
from web.fleet import FleetReader
from web.metrics import MetricsRoute

pytestmark = pytest.mark.unit


def test_counts_and_observations_land_once_per_flush(redis_client: redis.Redis, keys: Keys) -> None:
    recorder = MetricsRecorder(redis_client, keys, background=False)
    for _ in range(5):
        recorder.count(STEERS, outcome="accepted")
    recorder.count(MODEL_CALLS, result="ok")
    for seconds in (0.004, 0.3, 0.3, 400.0):
        recorder.observe(STEER_DELIVERY, seconds)
    assert recorder.flush() and recorder.flush()  # the second flush has nothing to add
    snap = read_snapshot(redis_client, keys)
    assert snap.total(STEERS.name, outcome="accepted") == 5
    assert snap.total(MODEL_CALLS.name) == 1
    hist = snap.histogram(STEER_DELIVERY.name)
    assert hist.count == 4 and hist.sum == pytest.approx(400.604)
    assert (
        dict(hist.buckets)[0.005] == 1 and dict(hist.buckets)[0.5] == 3 and dict(hist.buckets)[math.inf] == 4
    )
    assert snap.steers_last_minute == 5


def test_two_recorders_on_two_connections_add_up(real_redis: redis.Redis, keys: Keys) -> None:
    kwargs = real_redis.connection_pool.connection_kwargs
    other = redis.Redis(host=kwargs["host"], port=kwargs["port"], decode_responses=True)
    a, b = MetricsRecorder(real_redis, keys, background=False), MetricsRecorder(other, keys, background=False)
    a.count(TOOL_CALLS, tool="Bash", result="ok")
    b.count(TOOL_CALLS, tool="Bash", result="ok", amount=2)
    a.flush()
    b.flush()
    assert read_snapshot(real_redis, keys).total(TOOL_CALLS.name, tool="Bash") == 3
    other.close()


def test_a_failed_flush_keeps_its_counts_for_the_next(real_redis: redis.Redis, keys: Keys) -> None:
    # nothing listens; no retries (redis-py's default spent 4 s on them)
    broken = redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    recorder = MetricsRecorder(broken, keys, background=False)
    recorder.count(STEERS, outcome="accepted", amount=2)
    recorder.observe(STEER_DELIVERY, 1.0)
    assert not recorder.flush()
    recorder.count(STEERS, outcome="accepted")
    recorder.client = real_redis  # Redis is back
    assert recorder.flush()
    snap = read_snapshot(real_redis, keys)
    assert snap.total(STEERS.name, outcome="accepted") == 3
    assert snap.histogram(STEER_DELIVERY.name).count == 1


def test_label_values_cannot_break_the_layout(redis_client: redis.Redis, keys: Keys) -> None:
    recorder = MetricsRecorder(redis_client, keys, background=False)
    recorder.count(TOOL_CALLS, tool="a|b,c=d", result="ok")
    recorder.flush()
    [labels] = read_snapshot(redis_client, keys).counters[TOOL_CALLS.name]
    assert dict(labels) == {"tool": "a_b_c_d", "result": "ok"}
    assert retry_status(529) == "529" and retry_status(418) == "other" and retry_status(None) == "connection"


def test_quantiles_follow_histogram_quantile() -> None:
    hist = Histogram([(1.0, 50), (2.0, 100), (math.inf, 100)], 120.0, 100)
    assert hist.quantile(0.5) == pytest.approx(1.0)
    assert hist.quantile(0.75) == pytest.approx(1.5)
    assert Histogram([(1.0, 0), (math.inf, 0)], 0.0, 0).quantile(0.5) is None


def test_in_flight_calls_expire_with_their_process(redis_client: redis.Redis, keys: Keys) -> None:
    recorder = MetricsRecorder(redis_client, keys, background=False)
    with recorder.model_call(), recorder.model_call():
        recorder.flush()
        assert read_snapshot(redis_client, keys).model_calls_in_flight == 2
    later = int(time.time() * 1000) + 60_000  # the process stopped flushing a minute ago
    assert read_snapshot(redis_client, keys, now_ms=later).model_calls_in_flight == 0


def test_workers_register_and_leave(redis_client: redis.Redis, keys: Keys) -> None:
    presence = WorkerPresence(keys, 8, lambda: ["sess_B", "sess_A"], {"pid_namespace": "user"})
    pipe = redis_client.pipeline()
    presence.stage(pipe)
    pipe.execute()
    [worker] = live_workers(redis_client, keys)
    assert (worker.pid, worker.concurrency, worker.sessions) == (presence.pid, 8, ["sess_A", "sess_B"])
    assert worker.sandbox == {"pid_namespace": "user"}
    assert live_workers(redis_client, keys, now_ms=int(time.time() * 1000) + 60_000) == []  # gone silent
    presence.stage(pipe)
    pipe.execute()
    presence.leave(redis_client)
    assert live_workers(redis_client, keys) == []


def test_the_exposition_parses_with_prometheus_clients_parser(redis_client: redis.Redis, keys: Keys) -> None:
    recorder = MetricsRecorder(redis_client, keys, background=False)
    recorder.count(STEERS, outcome="accepted", amount=4)
    recorder.observe(STEER_DELIVERY, 0.2)
    recorder.flush()
    reader = FleetReader(redis_client, keys, SessionRegistry(redis_client, keys), cap=3)
    text = MetricsRoute(reader).metrics().get_data(as_text=True)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    steers = {
        s.labels["outcome"]: s.value
        for s in families["worktrain_steers"].samples
        if s.name.endswith("_total")
    }
    assert steers["accepted"] == 4 and steers["retracted"] == 0  # known outcomes start at 0
    delivery = {s.name: s.value for s in families["worktrain_steer_delivery_seconds"].samples}
    assert delivery["worktrain_steer_delivery_seconds_count"] == 1
    assert families["worktrain_model_calls_cap"].samples[0].value == 3
    assert families["worktrain_sessions"].type == "gauge"
    view = reader.view()
    assert view.totals.steersAccepted == 4 and view.delivery.count == 1 and view.steersPerMinute == 4


def test_the_docs_and_the_dashboard_name_exactly_the_metrics_served(
    fake_redis: redis.Redis, keys: Keys
) -> None:
    """docs/operations.md lists every metric /metrics serves; the Grafana dashboard and the
    alert examples use only metrics that exist."""
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parent.parent / "docs"
    reader = FleetReader(fake_redis, keys, SessionRegistry(fake_redis, keys), cap=0)
    text = MetricsRoute(reader).metrics().get_data(as_text=True)
    families = {f.name for f in text_string_to_metric_families(text)}
    operations = (docs / "operations.md").read_text()
    table = set(re.findall(r"^\| `(worktrain_[a-z_]+)` \|", operations, re.M))
    assert {name.removesuffix("_total") for name in table} == families  # counters by their sample name
    used = set(re.findall(r"worktrain_[a-z_]+", (docs / "grafana-dashboard.json").read_text()))
    used |= set(re.findall(r"worktrain_[a-z_]+", operations))
    base = {re.sub(r"_(bucket|count|sum|total)$", "", name) for name in used}
    served = families
    assert base <= served, base - served


@pytest.mark.processes
def test_a_forked_child_flushes_only_its_own_counts(real_redis: redis.Redis, keys: Keys) -> None:
    """Counted before a fork, flushed by the parent; the child (a gunicorn or RQ worker forked
    later) flushes only what it counted itself: nothing is counted twice."""
    import os

    recorder = MetricsRecorder(real_redis, keys, flush_seconds=3600)  # its thread sleeps
    recorder.count(STEERS, outcome="accepted", amount=5)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's exit code is the assertion
        code = 1
        try:
            recorder.count(STEERS, outcome="accepted")
            code = 0 if recorder.flush() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert recorder.flush()
    assert read_snapshot(real_redis, keys).total(STEERS.name, outcome="accepted") == 6


def test_close_does_not_wait_out_a_redis_outage(keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's client rides out an outage for a minute; a stopping process's last flush is
    given CLOSE_SECONDS, then the process goes on (its last second of counts is lost)."""
    import threading as th

    from daemon.bus.fleet import metrics

    released = th.Event()

    class Stuck:
        def __len__(self) -> int:
            return 1

        def __getattr__(self, name: str) -> object:
            return lambda *args, **kwargs: None

        def execute(self) -> None:
            released.wait(30)  # Redis away, the client retrying

    class Client:
        def pipeline(self, transaction: bool = False) -> Stuck:
            return Stuck()

    monkeypatch.setattr(metrics, "CLOSE_SECONDS", 0.2)
    recorder = MetricsRecorder(Client(), keys, background=False)  # type: ignore[arg-type]
    recorder.count(STEERS, outcome="accepted")
    done = th.Event()

    def close() -> None:
        recorder.close()
        done.set()

    closer = th.Thread(target=close)
    closer.start()
    assert done.wait(10), "close() waited for the stuck flush"
    released.set()
    closer.join()
