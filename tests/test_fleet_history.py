"""The fleet's history (docs/operations.md, SPEC 3.6 v5; issue 45 item 3): one sample a minute for 24 h in
Redis, bounded, one writer per minute whatever the number of samplers."""

from __future__ import annotations

import pytest
import redis

from daemon.bus.fleet.history import (
    SAMPLE_SECONDS,
    WINDOW_SECONDS,
    FleetHistory,
    FleetSample,
    FleetSampler,
    minute_of,
)
from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry

pytestmark = pytest.mark.unit

NOW = 1_800_000_000  # a minute start (seconds since the epoch)


def sample(t: int, running: int = 0) -> FleetSample:
    return FleetSample(
        t=t,
        workers=1,
        queueDepth=0,
        sessions={"running": running},
        inFlight=0,
        cap=0,
        steersPerMinute=0,
        p50=None,
        p99=None,
    )


def test_one_sample_a_minute_kept_for_a_day_and_no_longer(redis_client: redis.Redis, keys: Keys) -> None:
    history = FleetHistory(redis_client, keys)
    start = NOW - WINDOW_SECONDS - 10 * SAMPLE_SECONDS
    for minute in range(start, NOW + SAMPLE_SECONDS, SAMPLE_SECONDS):
        assert history.record(sample(minute))
    assert not history.record(sample(NOW, running=5)), "a second sample of the same minute is refused"
    assert not history.record(sample(NOW - SAMPLE_SECONDS)), "and one of an earlier minute"
    kept = redis_client.xlen(keys.fleet_history)
    print(f"entries kept after a day and ten minutes of samples: {kept}")
    assert kept == WINDOW_SECONDS // SAMPLE_SECONDS + 1  # the window's minutes, bounds included
    read = history.read(now=NOW)
    assert read[0].t == NOW - WINDOW_SECONDS and read[-1].t == NOW and len(read) == kept
    assert read[-1].sessions == {"running": 0}  # the first writer of the minute won
    assert [s.t for s in history.read(since=NOW - 2 * SAMPLE_SECONDS)] == [NOW - SAMPLE_SECONDS, NOW]
    assert history.last_minute() == NOW


def test_the_sampler_takes_the_minute_once_across_samplers(
    redis_client: redis.Redis, keys: Keys, registry: SessionRegistry
) -> None:
    registry.create(
        NewSession(workflowId="two-step", goal="g", workspacePath="/tmp", stepCount=2, firstStepId="s")
    )
    one, two = (FleetSampler(redis_client, keys, registry, cap=4) for _ in range(2))
    assert one.tick(NOW + 5)
    assert not two.tick(NOW + 20)  # the other host's reaper loop, later in the same minute
    assert not one.tick(NOW + 50)
    assert two.tick(NOW + SAMPLE_SECONDS + 1)
    samples = FleetHistory(redis_client, keys).read()
    assert [s.t for s in samples] == [NOW, minute_of(NOW + SAMPLE_SECONDS + 1)]
    assert samples[0].sessions["queued"] == 1 and samples[0].cap == 4
