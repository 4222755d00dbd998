"""Every worker-side script is safe to run twice (docs/redis.md, "Running a script twice").

A worker's client retries a command after a connection error, to ride out a Redis restart;
when the connection died after the script ran but before its reply arrived, the script runs
a second time. Each test runs a script, then runs the very same call again, and checks that
the second run changed nothing that matters.
"""

from __future__ import annotations

import json

import pytest

from daemon.bus.fleet.modelslots import ModelSlots
from daemon.bus.scripts import TAKE
from daemon.bus.session.fencing import Fenced
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.schema.endcheckpoint import EndCheckpoint, Store
from daemon.schema.records import SessionStatus, fold_journal

pytestmark = pytest.mark.unit


def new_session(registry: SessionRegistry) -> str:
    return registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=2))


def journal_types(bus: SteerBus, sid: str) -> list[str]:
    return [entry.type for entry in bus.journal(sid)]


def test_claim_twice_is_one_attempt(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    bus.accept(sid, "early")
    channel = bus.channel(sid, "w1", 30)
    first, again = channel.claim(), channel.claim()
    assert (first.attempt, again.attempt) == (1, 1)
    assert [s.text for s in again.inflight] == ["early"]
    assert registry.get(sid).attempt == 1  # type: ignore[union-attr]


def test_turn_started_twice_binds_the_same_turn(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    assert channel.start_turn(1).turn == 1
    assert channel.start_turn(1).turn == 1  # the re-run
    record = registry.get(sid)
    assert record is not None and (record.turnId, record.turnCount) == (1, 1)
    channel.turn_ended()
    assert channel.start_turn(2).turn == 2
    assert channel.start_turn().turn == 3  # without an expected turn it always counts one more


def test_open_turn_twice_returns_the_same_steers(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    bus.accept(sid, "a")
    first = channel.start_turn(1, drain=True)
    again = channel.start_turn(1, drain=True)
    assert first.turn == again.turn == 1
    assert [s.text for s in first.steers] == [s.text for s in again.steers] == ["a"]


def test_turn_started_twice_hands_out_the_same_receipts(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.checkpoint(0, ['{"m":1}'], [], 1)
    channel.start_turn(1)
    bus.accept(sid, "a")
    [steer] = channel.turn_ended()
    channel.checkpoint(1, ['{"m":2}', '{"m":3}'], [steer.offset], 2)
    first = channel.start_turn(2)
    assert (first.receipted, first.unsent) == ([], [1])  # journalled when its request leaves
    assert channel.request_sent(2) == [1]
    again = channel.start_turn(2)  # the first reply was lost: the worker runs it again
    assert again.receipted == [1]
    assert channel.start_turn(3).receipted == []


def test_checkpoint_twice_retires_and_journals_its_steers_once(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.start_turn(1)
    bus.accept(sid, "a")
    bus.accept(sid, "b")
    drained = channel.turn_ended()
    offsets = [s.offset for s in drained]
    message = json.dumps({"role": "user", "content": [{"type": "text", "text": "a\n\nb"}]})
    channel.checkpoint(0, [message], offsets, 2)
    # a steer drained after the first run must not be taken by the second
    channel.start_turn(2)
    channel.request_sent(2)
    bus.accept(sid, "c")
    channel.turn_ended()
    channel.checkpoint(0, [message], offsets, 2)  # the re-run
    assert channel.history() == [message]
    assert [s.text for s in bus.pending(sid)] == ["c"]
    assert journal_types(bus, sid) == ["accepted", "accepted", "delivered", "accepted"]
    views = fold_journal(bus.journal(sid))
    assert [(v.text, v.state) for v in views] == [("a", "delivered"), ("b", "delivered"), ("c", "pending")]


def test_turn_ended_twice_stores_what_the_steers_it_returns_call_for(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.checkpoint(0, ['{"m":"reply"}'], [], 1)
    channel.start_turn(1)
    end = EndCheckpoint(Store.IF_NO_STEERS, 1, ['{"m":"end"}'], '{"m":"partial"}', {"stepIndex": 1})
    assert channel.turn_ended(mark=None, end=end) == []
    assert channel.history() == ['{"m":"reply"}', '{"m":"end"}']
    assert channel.turn_ended(mark=None, end=end) == []  # the re-run: the same step again
    assert channel.history() == ['{"m":"reply"}', '{"m":"end"}']
    bus.accept(sid, "a")  # came between the first run and its re-run: the re-run takes it
    [steer] = channel.turn_ended(mark=None, end=end)
    assert channel.history() == ['{"m":"reply"}', '{"m":"partial"}']  # the worker adds the steer
    [again] = channel.turn_ended(mark=None, end=end)
    assert again.offset == steer.offset and channel.history() == ['{"m":"reply"}', '{"m":"partial"}']
    assert registry.get(sid).stepIndex == 1  # type: ignore[union-attr]


def test_release_twice_and_finish_twice(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    assert channel.release() == 2  # the session's second job (dispatch enqueued the first)
    assert channel.release() == 2  # its own `reaper:` mark: the same job, no new one
    assert bus.client.hget(bus.keys.session(sid).record, "jobs") == "2"
    other = bus.channel(sid, "w2", 30)
    other.claim()
    bus.accept(sid, "left over")
    assert other.finish(SessionStatus.COMPLETED, "workflow_complete") == [1]
    # the re-run answers what the first run recorded, and writes nothing
    assert other.finish(SessionStatus.COMPLETED, "workflow_complete") == [1]
    assert journal_types(bus, sid) == ["accepted", "undelivered"]
    record = registry.get(sid)
    assert record is not None and record.status is SessionStatus.COMPLETED


def test_take_twice_answers_the_steers_the_first_run_moved(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.start_turn(1)
    channel.turn_ended(SessionStatus.WAITING)
    bus.accept(sid, "a")
    keys = bus.keys.session(sid)
    bus.scripts.run(TAKE, keys, channel.fenced_args())  # its reply is lost
    assert bus.client.llen(keys.pending) == 0 and bus.client.llen(keys.inflight) == 1
    bus.accept(sid, "b")
    again = channel.take()
    assert [s.text for s in again.steers] == ["a", "b"]


def test_heartbeat_twice_renews_twice(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    assert channel.heartbeat() == channel.heartbeat()
    assert bus.client.get(bus.keys.session(sid).lease) == "w1"


def test_mark_waiting_twice_writes_the_same_field(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.mark_waiting("model_slot")
    channel.mark_waiting("model_slot")
    assert registry.get(sid).waitingFor == "model_slot"  # type: ignore[union-attr]
    channel.mark_waiting(None)
    channel.mark_waiting(None)
    assert registry.get(sid).waitingFor is None  # type: ignore[union-attr]


def test_mark_waiting_never_changes_a_finished_session(bus: SteerBus, registry: SessionRegistry) -> None:
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.mark_waiting("model_retry")
    channel.finish(SessionStatus.CANCELLED, "cancelled")
    assert registry.get(sid).waitingFor is None  # type: ignore[union-attr]  # finish clears it
    with pytest.raises(Fenced):
        channel.mark_waiting("model_retry")
    assert bus.client.get(bus.keys.session(sid).lease) is None


def test_slot_scripts_twice_change_nothing(bus: SteerBus) -> None:
    slots = ModelSlots(bus.client, bus.keys.model_slots, 1)
    assert slots.try_acquire("a").held and slots.try_acquire("a").held  # a second run renews
    assert [t for t, _ in slots.in_flight()] == ["a"]
    first, again = slots.try_acquire("b"), slots.try_acquire("b")
    assert (first.position, again.position) == (1, 1)  # the same place, not a second ticket
    assert slots.release("a") is True and slots.release("a") is False
    assert slots.try_acquire("b").held
    slots.close()
