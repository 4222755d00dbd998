"""An attempt's queued events (daemon/bus/session/attemptevents.py, daemon/bus/session/eventwriter.py): they
ride with the attempt's next script in one round trip, or the process's writer sends every
attempt's together; each session's stream keeps their order, and a refused attempt's are
dropped."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from daemon.bus.session.attemptevents import AttemptEvents
from daemon.bus.session.eventwriter import EventWriter
from daemon.bus.session.fencing import Fenced
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.schema.events import SessionCompleted, StepAdvanced, TurnEnded, TurnStarted
from daemon.schema.records import SessionStatus
from tests.roundtrips import RoundTrips, counting_client

pytestmark = pytest.mark.unit  # its real-Redis runs are raised by their fixtures (tests/tiers.py)


def claimed(bus: SteerBus, registry: SessionRegistry, worker: str = "w1") -> SessionChannel:
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=2))
    channel = bus.channel(sid, worker, 30)
    channel.claim()
    return channel


def stream(bus: SteerBus, channel: SessionChannel) -> list[str]:
    """The kinds in the session's stream, with each turn id where it has one."""
    import json

    out = []
    for _, fields in bus.client.xrange(channel.keys.events):
        event = json.loads(fields["data"])
        out.append(f"{event['kind']}:{event.get('turnId', '')}")
    return out


class ParkedWriter(EventWriter):
    """A writer whose thread never runs: what it would send waits for `write_once`."""

    def notice(self, attempt: AttemptEvents) -> None:
        self._due.append(attempt)


def events_of(
    bus: SteerBus, channel: SessionChannel, writer: EventWriter, mirrored: bool = True
) -> AttemptEvents:
    """An attempt's events; not `mirrored`: nothing written to wt:events (a worker's mirror
    thread does that, not the round trips counted here)."""
    return AttemptEvents(EventSink(bus.client if mirrored else None, bus.keys, None), channel, writer)


def test_queued_events_ride_with_the_next_script_before_its_change(bus, registry):
    channel = claimed(bus, registry)
    events = events_of(bus, channel, ParkedWriter(bus.client))
    sid = channel.session_id
    events.emit(TurnStarted(sessionId=sid, turnId=1))
    events.emit(StepAdvanced(sessionId=sid, turnId=1, fromStepId="a", toStepId="b", stepIndex=1, stepCount=2))
    assert stream(bus, channel) == []  # queued: no round trip of its own
    channel.checkpoint(0, ['{"role":"user","content":"x"}'], [], 2)
    assert stream(bus, channel) == ["turn_started:1", "step_advanced:1"]
    assert bus.client.xlen(bus.keys.events) == 2  # then to wt:events (a plain EventSink: at once)
    events.emit(TurnEnded(sessionId=sid, turnId=1, toolCalls=1))
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")  # rides before the finish
    events.emit(SessionCompleted(sessionId=sid, status="completed", outcome="workflow_complete"))
    assert stream(bus, channel)[-2:] == ["turn_ended:1", "session_completed:"]  # written at once


def test_riders_cost_the_script_no_round_trip_of_their_own(redis_server, keys):
    client = counting_client(redis_server.url)
    client.flushdb()
    bus = SteerBus(client, keys)
    channel = claimed(bus, SessionRegistry(client, keys))
    events = events_of(bus, channel, ParkedWriter(client), mirrored=False)
    channel.checkpoint(0, ["{}"], [], 1)  # the first run of each script loads it (NOSCRIPT)
    events.emit(TurnStarted(sessionId=channel.session_id, turnId=1))
    channel.checkpoint(0, ["{}"], [], 1)
    events.emit(TurnStarted(sessionId=channel.session_id, turnId=2))
    events.emit(TurnEnded(sessionId=channel.session_id, turnId=2))
    with RoundTrips() as trips:
        channel.checkpoint(0, ["{}"], [], 1)
    assert trips.count == 1
    assert stream(bus, channel) == ["turn_started:1", "turn_started:2", "turn_ended:2"]


def test_the_writer_sends_every_attempts_events_in_one_round_trip(redis_server, keys):
    client = counting_client(redis_server.url)
    client.flushdb()
    bus = SteerBus(client, keys)
    registry = SessionRegistry(client, keys)
    writer = ParkedWriter(client)
    channels = [claimed(bus, registry, f"w{i}") for i in range(5)]
    attempts = [events_of(bus, channel, writer, mirrored=False) for channel in channels]
    for turn in (1, 2):
        for attempt in attempts:
            attempt.emit(TurnStarted(sessionId=attempt.channel.session_id, turnId=turn))
    with RoundTrips() as trips:
        assert writer.write_once() == 5  # one emit.lua per session (its two batches merged)
    assert trips.count <= 2  # the pipeline (and a script load the first time)
    for channel in channels:
        assert stream(bus, channel) == ["turn_started:1", "turn_started:2"]
    assert writer.write_once() == 0


def test_a_refused_attempts_queued_events_are_dropped(bus, registry):
    channel = claimed(bus, registry)
    writer = ParkedWriter(bus.client)
    events = events_of(bus, channel, writer)
    events.emit(TurnStarted(sessionId=channel.session_id, turnId=1))
    bus.client.hset(channel.keys.record, "attempt", 9)  # another attempt claimed it meanwhile
    assert writer.write_once() == 1  # sent: emit.lua refuses it, and the fence records that
    assert stream(bus, channel) == []
    assert channel.fence is not None and channel.fence.refused is not None
    events.emit(TurnStarted(sessionId=channel.session_id, turnId=2))  # dropped at once
    assert writer.write_once() == 0 and not events.queued
    with pytest.raises(Fenced):
        channel.checkpoint(0, ["{}"], [], 1)


def test_one_attempts_events_keep_their_order_whoever_sends_them(bus, registry):
    """The session thread's scripts carry queued events while the writer's thread sends
    them too: the stream has every event once, in the order they were emitted."""
    channel = claimed(bus, registry)
    writer = EventWriter(bus.client, linger_seconds=0.001)
    events = events_of(bus, channel, writer)
    sid = channel.session_id
    stop = threading.Event()

    def scripts() -> None:
        while not stop.is_set():
            channel.checkpoint(0, ["{}"], [], 1)

    runner = threading.Thread(target=scripts)
    runner.start()
    try:
        for turn in range(1, 301):
            events.emit(TurnStarted(sessionId=sid, turnId=turn))
            if turn % 50 == 0:
                time.sleep(0.01)
    finally:
        stop.set()
        runner.join()
    events.flush()
    writer.close()
    assert stream(bus, channel) == [f"turn_started:{turn}" for turn in range(1, 301)]


def test_without_a_writer_each_batch_is_written_at_once(bus, registry):
    channel = claimed(bus, registry)
    events = AttemptEvents(EventSink(bus.client, bus.keys, None), channel)
    events.emit(TurnStarted(sessionId=channel.session_id, turnId=1))
    assert stream(bus, channel) == ["turn_started:1"]
    assert bus.client.xlen(bus.keys.events) == 1


def test_a_failed_round_trip_loses_its_events_and_says_so(bus, registry, monkeypatch, caplog):
    channel = claimed(bus, registry)
    writer = ParkedWriter(bus.client)
    events = events_of(bus, channel, writer)
    events.emit(TurnStarted(sessionId=channel.session_id, turnId=1))

    def down(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("Redis is down")

    monkeypatch.setattr("daemon.bus.session.eventwriter.run_calls", down)
    writer.write_once()
    assert "not written: Redis is down" in caplog.text
    assert not events.queued
