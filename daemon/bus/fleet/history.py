"""The fleet's history (docs/operations.md, SPEC 3.6 v5): one sample of the fleet a minute for 24 hours,
kept in Redis, so the Fleet page's charts and `worktrain top --history` show the last hours
the moment they open (before, the browser kept the readings it made while the page was open).

Layout: the stream `Keys.fleet_history`, one entry a minute whose id is the minute's start
(`<epoch ms>-0`) and whose one field `sample` is a `FleetSample` (JSON). The explicit id
makes the sampler safe to run anywhere, as often as it likes: the reaper loop of every
`worktrain worker` (worker/pool.py) takes a sample when the current minute has none, and a
second writer of the same minute is refused by Redis itself (an id not above the last).
Every add trims what is older than `WINDOW_SECONDS` (XADD MINID), so the stream holds about
1,440 entries, whatever the uptime.

`read_fleet_numbers` is the one reading of the fleet's live numbers, shared by the sample
and by the web tier's `GET /api/v2/fleet` and `/metrics` (web/fleet.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis
from pydantic import BaseModel, Field, ValidationError

from daemon.bus.fleet.metrics import STEER_DELIVERY
from daemon.bus.fleet.metricsread import Snapshot, read_snapshot
from daemon.bus.fleet.workers import WorkerInfo, live_workers
from daemon.bus.jobspec import queue_key
from daemon.bus.keys import Keys
from daemon.bus.replies import last_id
from daemon.bus.session.registry import SessionRegistry

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 60
WINDOW_SECONDS = 24 * 3600
FIELD = "sample"


@dataclass
class FleetNumbers:
    """One reading of everything: what /metrics renders, /api/v2/fleet summarises and a
    sample keeps."""

    snapshot: Snapshot
    workers: list[WorkerInfo]
    sessions: dict[str, int]
    queue_depth: int
    model_calls_in_flight: int
    cap: int


def read_fleet_numbers(client: redis.Redis, keys: Keys, registry: SessionRegistry, cap: int) -> FleetNumbers:
    snapshot = read_snapshot(client, keys)
    in_flight = snapshot.model_calls_in_flight
    if cap > 0:  # the semaphore's holders are the truth when there is a cap
        in_flight = int(client.zcard(keys.model_slots.holders))
    return FleetNumbers(
        snapshot=snapshot,
        workers=live_workers(client, keys),
        sessions=registry.status_counts(),
        queue_depth=int(client.llen(queue_key())),
        model_calls_in_flight=in_flight,
        cap=cap,
    )


class FleetSample(BaseModel):
    """The fleet at one minute (the Fleet page's charts, `worktrain top --history`)."""

    t: int = Field(description="The minute it stands for: its start, in seconds since the epoch.")
    workers: int
    queueDepth: int
    sessions: dict[str, int] = Field(description="Sessions by status.")
    inFlight: int = Field(description="Model calls in flight.")
    cap: int = Field(description="WORKTRAIN_MAX_MODEL_CALLS; 0: no cap.")
    steersPerMinute: int = Field(description="Steers accepted in the 60 s before the sample.")
    p50: float | None = Field(description="Steer delivery latency (s), since the fleet started.")
    p99: float | None

    @classmethod
    def of(cls, numbers: FleetNumbers, t: int) -> FleetSample:
        delivery = numbers.snapshot.histogram(STEER_DELIVERY.name)
        return cls(
            t=t,
            workers=len(numbers.workers),
            queueDepth=numbers.queue_depth,
            sessions=numbers.sessions,
            inFlight=numbers.model_calls_in_flight,
            cap=numbers.cap,
            steersPerMinute=numbers.snapshot.steers_last_minute,
            p50=delivery.quantile(0.5),
            p99=delivery.quantile(0.99),
        )


def minute_of(seconds: float) -> int:
    """The start of the minute `seconds` (since the epoch) falls in."""
    return int(seconds) // SAMPLE_SECONDS * SAMPLE_SECONDS


class FleetHistory:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.key = keys.fleet_history

    def record(self, sample: FleetSample) -> bool:
        """Add the sample of its minute; False when that minute (or a later one) has one."""
        oldest_ms = (sample.t - WINDOW_SECONDS) * 1000
        try:
            self.client.xadd(
                self.key,
                {FIELD: sample.model_dump_json()},
                id=f"{sample.t * 1000}-0",
                minid=oldest_ms,
                approximate=False,
            )
        except redis.ResponseError as exc:
            if "equal or smaller" in str(exc):  # another sampler took this minute first
                return False
            raise
        return True

    def last_minute(self) -> int | None:
        """The minute of the newest sample (seconds since the epoch), None without one."""
        newest = last_id(self.client.xrevrange(self.key, count=1))  # type: ignore[arg-type]
        if newest is None:
            return None
        return int(newest.split("-", 1)[0]) // 1000

    def read(self, since: int = 0, now: float | None = None) -> list[FleetSample]:
        """The samples of minutes after `since` (seconds since the epoch), oldest first,
        within the window before `now` (when given)."""
        start = max(since + 1, int(now) - WINDOW_SECONDS if now is not None else 0)
        samples: list[FleetSample] = []
        for entry_id, fields in self.client.xrange(self.key, min=f"{start * 1000}", max="+") or []:
            raw = fields.get(FIELD) if isinstance(fields, dict) else None
            try:
                samples.append(FleetSample.model_validate(json.loads(raw or "null")))
            except (ValidationError, ValueError, TypeError) as exc:
                log.warning("fleet history entry %s unreadable: %s", entry_id, exc)
        return samples


class FleetSampler:
    """Takes the minute's sample when it has none (each pass of the worker tier's reaper loop)."""

    def __init__(self, client: redis.Redis, keys: Keys, registry: SessionRegistry, cap: int) -> None:
        self.client, self.keys, self.registry, self.cap = client, keys, registry, cap
        self.history = FleetHistory(client, keys)
        self.done: int | None = None  # the last minute this process saw sampled

    def tick(self, now: float) -> bool:
        """Sample the current minute unless it has been (here or by another sampler)."""
        minute = minute_of(now)
        if self.done == minute:
            return False
        last = self.history.last_minute()
        if last is not None and last >= minute:
            self.done = minute
            return False
        numbers = read_fleet_numbers(self.client, self.keys, self.registry, self.cap)
        took = self.history.record(FleetSample.of(numbers, minute))
        self.done = minute
        return took
