"""Fencing (docs/durability.md): every worker-side script refuses a stale attempt, or any attempt on a
finished session, with or without a lease key, and writes nothing (real Redis and fakeredis).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from daemon.bus.keys import SessionKeys
from daemon.bus.replies import FenceRefusal
from daemon.bus.scripts import EMIT, WORKER_SCRIPTS, WorkerScript
from daemon.bus.session.fencing import Fence, Fenced, FencedEmitter
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.host.clock import utc_now_iso
from daemon.schema.records import SessionStatus
from daemon.schema.turnmarks import TurnMark

pytestmark = pytest.mark.unit

# Each worker-side script's own ARGV (after worker, attempt, lease_ms): calls that would
# write if they were let through.
SCRIPT_ARGS: dict[str, list[Any]] = {
    "turn_started": ["1", "", utc_now_iso()],
    "turn_ended": ["waiting"],
    "take": [],
    "checkpoint": [0, "[1]", 5, utc_now_iso(), '{"stepIndex": 9}', '{"role":"user"}'],
    "finish": ["failed", "error", "stale", utc_now_iso(), 60],
    "heartbeat": [],
    "release": [],
    "mark_waiting": ["model_slot"],
    "request_sent": [2, utc_now_iso()],
    "emit": ["", '{"kind": "turn_started", "sessionId": "s", "turnId": 9}'],
    "signal": ['{"kind": "progress"}', 100, 3600],
    "set_fields": ['{"delivery": "{}"}'],
}


def snapshot(client: redis.Redis, keys: SessionKeys) -> dict[str, Any]:
    """Every session key's content, and whether it has a TTL (not its exact value)."""
    state: dict[str, Any] = {}
    for key in keys.all():
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        content: Any = None
        if kind == "hash":
            content = client.hgetall(key)
        elif kind == "list":
            content = client.lrange(key, 0, -1)
        elif kind == "stream":
            content = client.xrange(key)
        elif kind == "string":
            content = client.get(key)
        state[key] = (kind, content, client.pttl(key) > 0)
    return state


Staged = tuple[str, SessionChannel, SessionChannel]


def staged(bus: SteerBus, registry: SessionRegistry, finished: bool) -> Staged:
    """A session attempt 1 (w1) ran, then attempt 2 (w2) took over; a steer is in flight
    and another pending. Optionally attempt 2 finished it."""
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=2))
    stale = bus.channel(sid, "w1", 30)
    stale.claim()
    stale.start_turn(1)
    bus.accept(sid, "in flight")
    stale.turn_ended()
    bus.client.delete(bus.keys.session(sid).lease)  # w1 froze; its lease lapsed
    current = bus.channel(sid, "w2", 30)
    current.claim()
    current.start_turn(2)
    bus.accept(sid, "pending")
    if finished:
        current.finish(SessionStatus.COMPLETED, "workflow_complete")
        bus.accept(sid, "refused")  # a finished session takes no steer
    return sid, stale, current


LEASES = ("absent", "the stale worker's", "the current worker's", "a reaper's mark")


def set_lease(client: redis.Redis, keys: SessionKeys, lease: str) -> None:
    holders = {"the stale worker's": "w1", "the current worker's": "w2", "a reaper's mark": "reaper:r1"}
    value = holders.get(lease)
    client.delete(keys.lease)
    if value is not None:
        client.set(keys.lease, value, px=30_000)


@pytest.mark.parametrize("finished", [False, True], ids=["live", "finished"])
@pytest.mark.parametrize("lease", LEASES)
@pytest.mark.parametrize("script", WORKER_SCRIPTS, ids=lambda script: script.name)
def test_a_stale_attempt_is_refused_and_writes_nothing(
    bus: SteerBus, registry: SessionRegistry, script: WorkerScript[Any], lease: str, finished: bool
) -> None:
    sid, stale, _ = staged(bus, registry, finished)
    keys = bus.keys.session(sid)
    set_lease(bus.client, keys, lease)
    before = snapshot(bus.client, keys)
    reply = bus.scripts.run(script, keys, stale.fenced_args(*SCRIPT_ARGS[script.name]))
    assert reply == FenceRefusal("finished" if finished else "stale_attempt")
    assert snapshot(bus.client, keys) == before


@pytest.mark.parametrize("lease", LEASES)
@pytest.mark.parametrize("script", WORKER_SCRIPTS, ids=lambda script: script.name)
def test_the_current_attempt_cannot_change_a_finished_session(
    bus: SteerBus, registry: SessionRegistry, script: str, lease: str
) -> None:
    sid, _, current = staged(bus, registry, finished=True)
    keys = bus.keys.session(sid)
    set_lease(bus.client, keys, lease)
    before = snapshot(bus.client, keys)
    reply = bus.scripts.run(script, keys, current.fenced_args(*SCRIPT_ARGS[script.name]))
    if script.name == "finish":  # its own second run: the first run's answer again (undelivered 1, 2)
        assert reply == [1, 2]
    else:
        assert reply == FenceRefusal("finished")
    assert snapshot(bus.client, keys) == before


@pytest.mark.parametrize("script", WORKER_SCRIPTS, ids=lambda script: script.name)
def test_a_lease_held_by_a_reapers_mark_fences_the_current_attempt(
    bus: SteerBus, registry: SessionRegistry, script: str
) -> None:
    sid, _, current = staged(bus, registry, finished=False)
    keys = bus.keys.session(sid)
    set_lease(bus.client, keys, "a reaper's mark")  # its lease lapsed and a reaper re-enqueued it
    before = snapshot(bus.client, keys)
    reply = bus.scripts.run(script, keys, current.fenced_args(*SCRIPT_ARGS[script.name]))
    assert reply == FenceRefusal("lease_lost")
    assert snapshot(bus.client, keys) == before


def test_the_current_attempt_takes_a_lapsed_lease_back(bus: SteerBus, registry: SessionRegistry) -> None:
    sid, _, current = staged(bus, registry, finished=False)
    keys = bus.keys.session(sid)
    bus.client.delete(keys.lease)  # lapsed during a long outage; nobody claimed meanwhile
    assert current.heartbeat().steers == 2
    assert bus.client.get(keys.lease) == "w2"


def test_a_refused_channel_stops_asking_redis(bus: SteerBus, registry: SessionRegistry) -> None:
    _, stale, _ = staged(bus, registry, finished=False)
    with pytest.raises(Fenced) as first:
        stale.heartbeat()
    assert (first.value.reason, first.value.attempt) == ("stale_attempt", 1)

    def no_redis(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a refused attempt touched Redis")

    bus.scripts.run = no_redis  # type: ignore[method-assign]
    for call in (
        stale.guard,
        stale.take,
        lambda: stale.start_turn(3).turn,
        lambda: stale.checkpoint(0, [], [], 3),
        lambda: stale.finish(SessionStatus.FAILED, "error"),
        stale.release,
    ):
        with pytest.raises(Fenced) as again:
            call()
        assert again.value is first.value


def test_a_claim_makes_the_earlier_attempt_stale(bus: SteerBus, registry: SessionRegistry) -> None:
    sid, stale, current = staged(bus, registry, finished=False)
    with pytest.raises(Fenced):
        stale.turn_ended()
    assert current.turn_ended() == [s for s in current.turn_ended()]  # the current one goes on
    record = registry.get(sid)
    assert record is not None and (record.attempt, record.worker) == (2, "w2")


def test_a_stale_attempt_writes_no_turn_mark(bus: SteerBus, registry: SessionRegistry) -> None:
    """The turn marks forks read (turn_ended.lua's KEYS[9]) are behind the same fence."""
    sid, stale, current = staged(bus, registry, finished=False)
    with pytest.raises(Fenced):
        stale.turn_ended(SessionStatus.RUNNING, TurnMark(turn=1, steps=1, state={"stepId": "s1"}))
    assert not bus.client.exists(bus.keys.turns_of(sid))
    current.turn_ended(SessionStatus.RUNNING, TurnMark(turn=2, state={"stepId": "s2"}))
    assert bus.client.hgetall(bus.keys.turns_of(sid)) == {
        "end:2": '{"steps":0}',
        "state:2": '{"stepId":"s2"}',
    }


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_guard_trusts_a_fresh_lease_and_asks_redis_past_it(bus: SteerBus, registry: SessionRegistry) -> None:
    sid, _, current = staged(bus, registry, finished=False)
    clock = Ticks()
    current.fence = Fence(sid, current.attempt, lease_seconds=30, clock=clock)
    calls: list[str] = []
    run = bus.scripts.run

    def counting(script: WorkerScript[Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(script.name)
        return run(script, *args, **kwargs)

    bus.scripts.run = counting  # type: ignore[method-assign]
    current.guard()
    assert calls == []  # renewed just now: no round trip
    clock.now += 19  # within two thirds of the lease
    current.guard()
    assert calls == []
    clock.now += 2  # past it (a freeze, a partition): ask Redis
    current.guard()
    assert calls == ["heartbeat"]
    current.guard()
    assert calls == ["heartbeat"]  # that heartbeat renewed the trust
    bus.client.hset(bus.keys.session(sid).record, "attempt", 3)  # another attempt claimed
    clock.now += 21
    with pytest.raises(Fenced):
        current.guard()


def test_events_of_a_refused_attempt_are_dropped_and_a_finish_closes_cleanly(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    sid, stale, current = staged(bus, registry, finished=False)
    written: list[str] = []

    class Sink:
        def emit(self, *events: Any) -> None:
            written.extend(events)

    stale_events = FencedEmitter(Sink(), stale.guard)
    clock = Ticks()
    stale.fence = Fence(sid, 1, lease_seconds=30, clock=clock)
    stale_events.emit("while trusted")  # within the trust window nothing asks Redis
    clock.now += 60  # frozen past the lease
    stale_events.emit("after the freeze")
    stale_events.emit("and after")
    assert written == ["while trusted"]
    current_events = FencedEmitter(Sink(), current.guard)
    current.finish(SessionStatus.COMPLETED, "workflow_complete")
    assert current.fence is not None
    current.fence.clock = lambda: 1e12  # however long the finish took, its own ending is written
    current_events.emit("session_completed")
    assert written == ["while trusted", "session_completed"]


def test_the_finishing_attempt_closes_once_and_nothing_follows_session_completed(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    """emit.lua: the attempt that finished the session writes its closing batch (ending with
    session_completed) once; after it no event of any attempt is appended (docs/durability.md)."""
    sid, stale, current = staged(bus, registry, finished=True)
    keys = bus.keys.session(sid)
    closing = [
        "",  # no webhook deliveries (ARGV[4])
        '{"kind": "tool_call_completed", "sessionId": "s", "turnId": 2}',
        '{"kind": "session_completed", "sessionId": "s", "status": "completed", "outcome": "x"}',
    ]
    assert bus.scripts.run(EMIT, keys, stale.fenced_args(*closing)) == FenceRefusal("finished")
    assert bus.scripts.run(EMIT, keys, current.fenced_args(*closing)) is None  # {'ok'}
    entries: Any = bus.client.xrange(keys.events)
    kinds = [json.loads(fields["data"])["kind"] for _, fields in entries]
    assert kinds[-2:] == ["tool_call_completed", "session_completed"]
    assert bus.client.ttl(keys.events) > 0  # it expires with the rest of the session
    before = snapshot(bus.client, keys)
    for channel in (current, stale):
        assert bus.scripts.run(EMIT, keys, channel.fenced_args(*closing)) == FenceRefusal("finished")
    assert snapshot(bus.client, keys) == before
