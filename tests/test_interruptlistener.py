"""The per-process interrupt listener (daemon/bus/session/interruptlistener.py) on a real Redis: one
subscription wakes the sessions it watches, checks the record first, and resyncs what it
missed while it was not subscribed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.interruptlistener import InterruptListener
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.turn.interrupt import TurnInterrupt

pytestmark = pytest.mark.unit


def eventually(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def parts(
    real_redis: redis.Redis, keys: Keys
) -> Iterator[tuple[SteerBus, SessionRegistry, InterruptListener]]:
    kwargs = real_redis.connection_pool.connection_kwargs
    listener = InterruptListener(
        lambda: redis.Redis(host=kwargs["host"], port=kwargs["port"], decode_responses=True), keys
    )
    yield SteerBus(real_redis, keys), SessionRegistry(real_redis, keys), listener
    listener.stop()


def live(bus: SteerBus, registry: SessionRegistry, worker: str = "w1"):
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=2))
    channel = bus.channel(sid, worker, 30)
    channel.claim()
    channel.start_turn(1)
    return sid, channel


def test_one_subscription_wakes_each_watched_session_it_names(parts) -> None:
    bus, registry, listener = parts
    listener.start()
    assert listener.subscribed.wait(5)
    first, a = live(bus, registry)
    second, b = live(bus, registry, "w2")
    unwatched, c = live(bus, registry, "w3")
    with listener.watching(first, a.interrupt), listener.watching(second, b.interrupt):
        bus.accept(second, "now", mode="interrupt")
        bus.accept(unwatched, "now", mode="interrupt")
        assert eventually(lambda: b.interrupt.is_set)
        time.sleep(0.1)
        assert not a.interrupt.is_set and not c.interrupt.is_set


def test_an_announcement_the_record_no_longer_backs_wakes_nobody(parts, keys: Keys) -> None:
    bus, registry, listener = parts
    listener.start()
    assert listener.subscribed.wait(5)
    sid, channel = live(bus, registry)
    with listener.watching(sid, channel.interrupt):
        bus.client.publish(keys.interrupts, f"{sid} 1")  # no interruptTurn: e.g. retracted since
        time.sleep(0.2)
        assert not channel.interrupt.is_set


def test_what_was_announced_before_the_subscription_is_resynced(parts) -> None:
    bus, registry, listener = parts
    sid, channel = live(bus, registry)
    bus.accept(sid, "now", mode="interrupt")  # nobody is subscribed yet: the message is lost
    with listener.watching(sid, channel.interrupt):
        listener.start()
        assert eventually(lambda: channel.interrupt.is_set)


def test_a_lost_connection_is_subscribed_again_and_resynced(parts, real_redis: redis.Redis) -> None:
    bus, registry, listener = parts
    listener.start()
    assert listener.subscribed.wait(5)
    sid, channel = live(bus, registry)
    with listener.watching(sid, channel.interrupt):
        for client in real_redis.client_list(_type="pubsub"):
            real_redis.client_kill_filter(_id=client["id"])
        bus.accept(sid, "while it was away", mode="interrupt")
        assert eventually(lambda: channel.interrupt.is_set, timeout=10)


def test_a_request_for_another_turn_is_void() -> None:
    interrupt = TurnInterrupt("s")
    interrupt.begin(3)
    assert not interrupt.request(2)
    assert not interrupt.is_set


def test_a_cancel_is_heard_at_once_and_cuts_what_runs(parts) -> None:
    bus, registry, listener = parts
    listener.start()
    assert listener.subscribed.wait(5)
    sid, channel = live(bus, registry)
    cut: list[str] = []
    with listener.watching(sid, channel.interrupt), channel.interrupt.watch(lambda: cut.append("cut")):
        assert channel.interrupt.heard() and not channel.interrupt.needs_ticks
        assert bus.cancel(sid)[0] == "requested"
        assert eventually(lambda: cut == ["cut"])  # no heartbeat: the announcement did it
        assert channel.interrupt.cancelled
    assert not channel.interrupt.watched


def test_a_session_is_heard_only_while_the_listener_is_subscribed(parts) -> None:
    bus, registry, listener = parts
    sid, channel = live(bus, registry)
    with listener.watching(sid, channel.interrupt), channel.interrupt.watch(lambda: None):
        assert channel.interrupt.needs_ticks  # not subscribed yet: its heartbeat comes every tick
        listener.start()
        assert listener.subscribed.wait(5) and not channel.interrupt.needs_ticks
        listener.stop()
        assert channel.interrupt.needs_ticks  # no listener: every tick again
