"""The fleet-wide model-call semaphore (daemon/bus/fleet/modelslots.py, slot_*.lua), on real
Redis and fakeredis."""

from __future__ import annotations

import random
import threading
import time

import pytest
import redis

from daemon.bus.fleet.modelslots import ModelSlots, call_token
from daemon.bus.keys import Keys
from daemon.host.embedded_redis import RedisServer
from tests.roundtrips import RoundTrips, counting_client

pytestmark = pytest.mark.unit


def slots(client: redis.Redis, limit: int = 2, ttl: float = 30.0, wait_ttl: float = 5.0) -> ModelSlots:
    return ModelSlots(client, Keys("wt").model_slots, limit, ttl_seconds=ttl, wait_ttl_seconds=wait_ttl)


def test_at_most_limit_calls_hold_a_slot(redis_client: redis.Redis) -> None:
    cap = slots(redis_client, limit=2)
    assert cap.try_acquire("a").held and cap.try_acquire("b").held
    third = cap.try_acquire("c")
    assert (third.held, third.position, third.free) == (False, 1, 0)
    assert sorted(token for token, _ in cap.in_flight()) == ["a", "b"]
    assert cap.release("a") is True
    assert cap.try_acquire("c").held
    assert cap.release("a") is False  # a second release changes nothing


def test_the_line_is_served_in_arrival_order(redis_client: redis.Redis) -> None:
    cap = slots(redis_client, limit=1)
    assert cap.try_acquire("first").held
    assert [cap.try_acquire(t).position for t in ("w1", "w2", "w3")] == [1, 2, 3]
    cap.release("first")
    # w3 asks first after the release, but w1 is ahead of it: the slot waits for w1
    assert not cap.try_acquire("w3").held and not cap.try_acquire("w2").held
    assert cap.try_acquire("w1").held
    cap.release("w1")
    assert cap.try_acquire("w2").held
    assert cap.try_acquire("w3").position == 1


def test_a_waiter_that_gives_up_leaves_the_line(redis_client: redis.Redis) -> None:
    cap = slots(redis_client, limit=1)
    cap.try_acquire("holder")
    cap.try_acquire("quitter")
    assert cap.try_acquire("patient").position == 2
    assert cap.release("quitter") is False  # it held no slot
    assert cap.try_acquire("patient").position == 1


def test_a_dead_holders_slot_comes_back_when_it_expires(redis_client: redis.Redis) -> None:
    dead = slots(redis_client, limit=1, ttl=0.3)
    assert dead.try_acquire("dead").held
    dead.close()  # its process dies: its keeper no longer renews the slot
    cap = slots(redis_client, limit=1, ttl=0.3)
    assert not cap.try_acquire("next").held
    time.sleep(0.45)
    assert cap.try_acquire("next").held
    assert [token for token, _ in cap.in_flight()] == ["next"]


def test_a_renewed_slot_outlives_its_ttl_and_a_renew_never_queues(redis_client: redis.Redis) -> None:
    cap = slots(redis_client, limit=1, ttl=0.4)
    cap.try_acquire("long-call")
    for _ in range(4):
        time.sleep(0.15)
        assert cap.renew(["long-call"]) == []
    assert not cap.try_acquire("other").held
    cap.release("other")
    assert cap.renew(["never-held"]) == ["never-held"]
    assert redis_client.zcard(Keys("wt").model_slots.queue) == 0


def test_a_dead_waiter_loses_its_place(redis_client: redis.Redis) -> None:
    cap = slots(redis_client, limit=1, wait_ttl=0.3)
    cap.try_acquire("holder")
    cap.try_acquire("dead-waiter")  # and never asks again
    assert cap.try_acquire("alive").position == 2
    time.sleep(0.45)
    assert cap.try_acquire("alive").position == 1
    cap.release("holder")
    assert cap.try_acquire("alive").held


def test_the_keeper_renews_what_this_process_holds(redis_client: redis.Redis) -> None:
    cap = slots(redis_client, limit=1, ttl=0.3)
    token = call_token("sess_01JD0000000000000000000000")
    with cap.holding(token):
        assert cap.try_acquire(token).held
        time.sleep(0.8)  # more than two lifetimes: only the keeper thread keeps it
        assert [t for t, _ in cap.in_flight()] == [token]
    assert cap.in_flight() == []
    cap.close()


def test_acquire_and_release_are_one_round_trip_each(redis_server: RedisServer) -> None:
    client = counting_client(redis_server.url)
    client.flushdb()
    cap = slots(client, limit=1)
    cap.try_acquire("warm-up")  # loads the script (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA)
    cap.release("warm-up")
    with RoundTrips() as acquire:
        assert cap.try_acquire("a").held
    with RoundTrips() as wait:
        assert not cap.try_acquire("b").held
    with RoundTrips() as release:
        cap.release("a")
    assert cap.try_acquire("c").position == 2
    with RoundTrips() as renew:
        assert cap.renew(["b", "c", "d"]) == ["b", "c", "d"]  # waiting or unknown: not held
    assert (acquire.count, wait.count, release.count, renew.count) == (1, 1, 1, 1)
    client.close()


def test_two_workers_with_their_own_clients_share_the_cap(redis_server: RedisServer) -> None:
    """Many threads on separate connections (as separate workers would be): never more than
    `limit` holders, everyone served."""
    limit, callers, calls = 3, 8, 6
    clients = [redis.Redis.from_url(redis_server.url, decode_responses=True) for _ in range(callers)]
    clients[0].flushdb()
    peak: list[int] = []
    held = 0
    lock = threading.Lock()
    errors: list[BaseException] = []

    def caller(index: int) -> None:
        nonlocal held
        cap = slots(clients[index], limit=limit)
        rng = random.Random(index)
        try:
            for _ in range(calls):
                token = call_token("sess_01JD0000000000000000000000")
                while not cap.try_acquire(token).held:
                    time.sleep(0.002)
                with lock:
                    held += 1
                    peak.append(held)
                time.sleep(rng.uniform(0, 0.01))
                with lock:
                    held -= 1
                cap.release(token)
        except (redis.RedisError, AssertionError) as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(peak) == callers * calls
    assert max(peak) <= limit
    for client in clients:
        client.close()


def test_a_cap_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        ModelSlots(redis.Redis(), Keys("wt").model_slots, 0)


def test_a_release_wakes_exactly_the_waiter_whose_turn_it_is(real_redis: redis.Redis) -> None:
    # real Redis only: fakeredis' pub/sub does not work under redis-py's hiredis parser
    cap = slots(real_redis, limit=1)
    cap.try_acquire("holder")
    cap.try_acquire("first")
    cap.try_acquire("second")
    with cap.waiting("first") as first, cap.waiting("second") as second:
        assert first.wait(5) and second.wait(5)  # subscribed: each asks again, once
        first.clear()
        second.clear()
        assert cap.release("holder") is True
        assert first.wait(5)  # the release named it
        assert not second.is_set()
        assert cap.try_acquire("first").held
        assert cap.release("second") is False  # leaving the line frees no slot: nobody is woken
        assert not second.is_set()
    cap.close()


def test_a_release_with_nobody_waiting_publishes_nothing(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    client.flushdb()
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.subscribe(Keys("wt").model_slots.released)
    listener.get_message(timeout=1)
    cap = slots(client, limit=1)
    cap.try_acquire("alone")
    cap.release("alone")
    assert listener.get_message(timeout=0.3) is None
    cap.try_acquire("holder")
    cap.try_acquire("waiter")
    cap.release("holder")
    message = listener.get_message(timeout=2)
    assert message is not None and message["data"] == "waiter"
    listener.close()
    client.close()
