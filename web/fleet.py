"""The fleet, read from Redis (docs/operations.md): `GET /api/v2/workers`, `GET /api/v2/fleet` (the
console's Fleet page and `worktrain top`) and the numbers behind `GET /metrics`
(web/metrics.py renders the same `FleetReader`, so the page and the scrape never disagree).

Everything here is read at request time from what the workers and web processes publish
(daemon/bus/fleet/metrics.py, daemon/bus/fleet/workers.py): no state of its own, so a web restart, or
another web process, answers the same.
"""

from __future__ import annotations

import time
from typing import Literal

import redis
from flask import Response, request
from pydantic import BaseModel

from daemon.bus.fleet.history import (
    SAMPLE_SECONDS,
    WINDOW_SECONDS,
    FleetHistory,
    FleetNumbers,
    FleetSample,
    read_fleet_numbers,
)
from daemon.bus.fleet.metrics import (
    FENCED,
    MODEL_CALLS,
    MODEL_RETRIES,
    STEER_DELIVERY,
    STEERS,
    TOKENS,
)
from daemon.bus.fleet.workers import WorkerInfo, live_workers
from daemon.bus.keys import Keys
from daemon.bus.session.registry import SessionRegistry
from web.errors import json_response
from web.models import FleetHistoryQuery, parse_query


class ModelCallsNow(BaseModel):
    inFlight: int
    cap: int  # WORKTRAIN_MAX_MODEL_CALLS; 0: no cap


class Latency(BaseModel):
    """A histogram's estimate (Prometheus' histogram_quantile), seconds; null before any event."""

    p50: float | None
    p99: float | None
    count: int


class FleetTotals(BaseModel):
    steersAccepted: int
    modelCalls: int
    modelCallErrors: int  # failed: an error answer or none (not `interrupted`, not `ok`)
    modelCallsInterrupted: int  # abandoned on purpose: an interrupt steer, a cancel, a stop
    modelRetries: int
    tokens: int
    fenced: int


class FleetView(BaseModel):
    workers: int
    queueDepth: int
    sessions: dict[str, int]  # status -> count
    modelCalls: ModelCallsNow
    steersPerMinute: int  # accepted in the last 60 s (10 s buckets)
    delivery: Latency  # accepted -> the model request that carried it
    totals: FleetTotals


class FleetReply(BaseModel):
    success: Literal[True]
    data: FleetView


class WorkersData(BaseModel):
    workers: list[WorkerInfo]


class WorkersReply(BaseModel):
    success: Literal[True]
    data: WorkersData


class FleetHistoryData(BaseModel):
    samples: list[FleetSample]
    intervalSeconds: int = SAMPLE_SECONDS
    windowSeconds: int = WINDOW_SECONDS


class FleetHistoryReply(BaseModel):
    success: Literal[True]
    data: FleetHistoryData


class FleetReader:
    def __init__(self, client: redis.Redis, keys: Keys, registry: SessionRegistry, cap: int) -> None:
        self.client = client
        self.keys = keys
        self.registry = registry
        self.cap = cap
        self.history = FleetHistory(client, keys)

    def numbers(self) -> FleetNumbers:
        return read_fleet_numbers(self.client, self.keys, self.registry, self.cap)

    def view(self) -> FleetView:
        n = self.numbers()
        s = n.snapshot
        delivery = s.histogram(STEER_DELIVERY.name)
        calls = s.total(MODEL_CALLS.name)
        interrupted = s.total(MODEL_CALLS.name, result="interrupted")
        return FleetView(
            workers=len(n.workers),
            queueDepth=n.queue_depth,
            sessions=n.sessions,
            modelCalls=ModelCallsNow(inFlight=n.model_calls_in_flight, cap=n.cap),
            steersPerMinute=s.steers_last_minute,
            delivery=Latency(p50=delivery.quantile(0.5), p99=delivery.quantile(0.99), count=delivery.count),
            totals=FleetTotals(
                steersAccepted=int(s.total(STEERS.name, outcome="accepted")),
                modelCalls=int(calls),
                modelCallErrors=int(calls - s.total(MODEL_CALLS.name, result="ok") - interrupted),
                modelCallsInterrupted=int(interrupted),
                modelRetries=int(s.total(MODEL_RETRIES.name)),
                tokens=int(s.total(TOKENS.name)),
                fenced=int(s.total(FENCED.name)),
            ),
        )

    # --- the views ---------------------------------------------------------------------------

    def fleet(self) -> Response:
        return json_response({"success": True, "data": self.view().model_dump(mode="json")})

    def fleet_history(self) -> Response:
        """The fleet's samples, one a minute for the last 24 hours (daemon/bus/fleet/history.py)."""
        query = parse_query(FleetHistoryQuery, request.args)
        samples = self.history.read(query.since, now=time.time())
        data = FleetHistoryData(samples=samples)
        return json_response({"success": True, "data": data.model_dump(mode="json")})

    def list_workers(self) -> Response:
        workers = [w.model_dump(mode="json") for w in live_workers(self.client, self.keys)]
        return json_response({"success": True, "data": {"workers": workers}})
