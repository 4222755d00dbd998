"""The shared loops of a worker process (daemon/bus/session/leasebeats.py,
daemon/bus/session/journalwaiter.py, daemon/session/sessionhub.py): one pipelined heartbeat
for many sessions, fenced per session; one XREAD waking exactly the idle sessions whose
journal grew; the idle wait through the hub costs no round trip of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis

from daemon.agent.loop import idle_wait
from daemon.bus.scripts import HEARTBEAT
from daemon.bus.session.fencing import Fenced
from daemon.bus.session.journalwaiter import JournalWaiter
from daemon.bus.session.leasebeats import LeaseBeats
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.host.redisconn import as_text
from daemon.session.sessionhub import SessionHub

pytestmark = pytest.mark.unit


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def claimed(bus: SteerBus, registry: SessionRegistry, n: int, lease: float = 30.0) -> list[SessionChannel]:
    channels = []
    for i in range(n):
        sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp"))
        channel = bus.channel(sid, f"w{i}", lease)
        channel.claim()
        channels.append(channel)
    return channels


class Counted:
    """Counts the pipelines a client sends (one execute = one round trip)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.executes = 0
        self.commands = 0

    def pipeline(self, transaction: bool = True) -> Any:
        pipe = self.client.pipeline(transaction=transaction)
        real = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            self.executes += 1
            self.commands += len(pipe.command_stack)
            return real(raise_on_error=raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_one_round_trip_beats_every_due_session_and_a_refusal_stops_only_its_own(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    channels = claimed(bus, registry, 5)
    counted = Counted(bus.client)
    beats = LeaseBeats(bus, counted, lease_seconds=30.0)  # type: ignore[arg-type]
    entries = [beats.add(channel) for channel in channels]
    bus.client.script_load(HEARTBEAT.source)  # else the first run loads it
    for entry in entries:
        entry.sent_at -= 100  # all due now (the loop's own tick is 10 s away)
    assert beats.run_once() == 5
    assert (counted.executes, counted.commands) == (1, 5)  # five sessions, one round trip
    for channel in channels:
        assert channel.fence is not None and channel.fence.trusted
    # another attempt takes session 0 over: only session 0's beat is refused
    bus.client.delete(channels[0].keys.lease)
    bus.channel(channels[0].session_id, "other", 30).claim()
    entries[1].idle = True
    bus.client.hset(channels[1].keys.record, "cancelRequested", 1)
    for entry in entries:
        entry.sent_at -= 100
    assert beats.run_once() == 5
    with pytest.raises(Fenced):
        channels[0].guard()
    assert entries[0].wake.is_set()
    assert entries[1].wake.is_set()  # an idle session learns of its cancel from the beat
    assert entries[1].check is not None and entries[1].check.cancel_requested
    assert not entries[2].wake.is_set()
    for channel in channels[1:]:
        channel.guard()  # the others are untouched
    assert beats.run_once() == 1  # the idle one only: the refused one never again, the rest not due
    beats.close()


def test_busy_sessions_are_beaten_every_third_of_the_lease_idle_ones_every_tick(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    busy, idle = claimed(bus, registry, 2, lease=30.0)
    beats = LeaseBeats(bus, bus.client, lease_seconds=30.0, tick_seconds=1.0)
    busy_beat, idle_beat = beats.add(busy), beats.add(idle)
    idle_beat.idle = True
    assert beats.due(time.monotonic()) == [idle_beat]
    assert set(beats.due(time.monotonic() + 10)) == {busy_beat, idle_beat}
    beats.close()


def test_a_running_call_is_beaten_every_tick_unless_a_listener_hears_its_cancels(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    calling, heard = claimed(bus, registry, 2, lease=30.0)
    beats = LeaseBeats(bus, bus.client, lease_seconds=30.0, tick_seconds=1.0)
    calling_beat, heard_beat = beats.add(calling), beats.add(heard)
    heard.interrupt.heard = lambda: True  # the process's listener is subscribed
    with calling.interrupt.watch(lambda: None), heard.interrupt.watch(lambda: None):
        assert beats.due(time.monotonic()) == [calling_beat]  # a model call or a tool in flight
        assert set(beats.due(time.monotonic() + 10)) == {calling_beat, heard_beat}  # the interval
    beats.close()


def test_the_beats_reload_their_script_after_a_flush(bus: SteerBus, registry: SessionRegistry) -> None:
    (channel,) = claimed(bus, registry, 1)
    beats = LeaseBeats(bus, bus.client, lease_seconds=30.0)
    beats.add(channel).idle = True
    bus.client.script_flush()
    assert beats.run_once() == 1
    assert channel.fence is not None and channel.fence.refused is None
    beats.close()


def own_connection(client: redis.Redis) -> redis.Redis:
    """A single-connection client to the same Redis (real or fake) as `client`."""
    kwargs = client.connection_pool.connection_kwargs
    if isinstance(client, fakeredis.FakeRedis):  # its server is named by host (a random id)
        return fakeredis.FakeRedis(host=kwargs["host"], port=kwargs["port"], decode_responses=True)
    own = redis.Redis(host=kwargs["host"], port=kwargs["port"], decode_responses=True, socket_timeout=10)
    return own.client()


def test_one_waiter_wakes_exactly_the_sessions_whose_journal_grew(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    channels = claimed(bus, registry, 4)
    fake = isinstance(bus.client, fakeredis.FakeRedis)  # no CLIENT UNBLOCK: joins at the next slice
    waiter = JournalWaiter(own_connection(bus.client), bus.client, slice_seconds=0.3 if fake else 5.0)
    woken: dict[int, bool] = {}
    cursors = [channel.take().cursor for channel in channels]

    def wait(i: int) -> None:
        woken[i] = waiter.wait(channels[i].keys.journal, cursors[i], 1.5, threading.Event())

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # each joins a read that is already blocking: CLIENT UNBLOCK adds it
    bus.accept(channels[1].session_id, "steer one")
    bus.accept(channels[3].session_id, "steer three")
    for thread in threads:
        thread.join(10)
    # woken within the 1.5 s waits although a read blocks 5 s: the read was cut short to add them
    assert woken == {0: False, 1: True, 2: False, 3: True}
    if not fake:
        assert waiter.round_trips <= 10  # one read for everyone, sent again as waits joined
    waiter.close()


def test_an_idle_wait_through_the_hub_takes_its_steer_without_round_trips_of_its_own(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    (channel,) = claimed(bus, registry, 1)
    counted = Counted(bus.client)
    beats = LeaseBeats(bus, counted, lease_seconds=30.0, tick_seconds=0.2)  # type: ignore[arg-type]
    hub = SessionHub(beats, JournalWaiter(own_connection(bus.client), bus.client, slice_seconds=1.0))
    calls: list[str] = []
    with hub.attend(channel) as looped:
        real_heartbeat = SessionChannel.heartbeat

        def spy(self: SessionChannel) -> Any:
            calls.append("heartbeat")
            return real_heartbeat(self)

        SessionChannel.heartbeat = spy  # type: ignore[method-assign]
        try:
            timer = threading.Timer(0.7, lambda: bus.accept(channel.session_id, "wake up"))
            timer.start()
            got = idle_wait(looped, 10.0, lambda: False)
        finally:
            SessionChannel.heartbeat = real_heartbeat  # type: ignore[method-assign]
    hub.close()
    assert not isinstance(got, Exception) and [as_text(s.text) for s in got] == ["wake up"]  # type: ignore[union-attr]
    assert calls == []  # between its slices the wait read the shared beats' answers
    assert counted.executes >= 3  # the shared loop beat it (every 0.2 s while idle)
