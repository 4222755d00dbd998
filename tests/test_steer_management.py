"""Steer management on the bus (README's Managing steers), real Redis and fakeredis: retract.lua, edit.lua,
the journal's retracted/edited entries, receipts folded from it, the interrupt flag."""

from __future__ import annotations

import hashlib
import threading
import time

import fakeredis
import pytest

from daemon.bus.session.receipts import SessionMissing, SteerReceipts
from daemon.bus.session.steerbus import SteerChange, SteerOutcome
from daemon.schema.records import SessionStatus
from tests.test_bus import new_session

pytestmark = pytest.mark.unit

UNKNOWN = "sess_01JD0000000000000000000000"


def running(bus, registry):
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.start_turn(1)
    return sid, channel


def test_retract_of_a_pending_steer_takes_it_out_and_journals_it(bus, registry, keys):
    sid = new_session(registry)
    for text in ("one", "two", "three"):
        bus.accept(sid, text)
    result = bus.retract(sid, 2)
    assert (result.change, result.previous_text) == (SteerChange.RETRACTED, "two")
    assert [s.text for s in bus.pending(sid)] == ["one", "three"]
    views = SteerReceipts(bus).folded(sid).fold.sorted()
    assert [(v.offset, v.state) for v in views] == [(1, "pending"), (2, "retracted"), (3, "pending")]
    assert views[1].retractedAt == result.at
    retracted = [e for e in bus.journal(sid) if e.type == "retracted"]
    assert [(e.offset, e.text) for e in retracted] == [(2, "two")]  # the text kept for audit
    events = [f["data"] for _, f in bus.client.xrange(keys.session(sid).events)]
    assert any('"kind":"steer_retracted"' in e and '"offset":2' in e for e in events)


def test_a_steer_the_drain_took_cannot_be_retracted_or_edited(bus, registry):
    sid, channel = running(bus, registry)
    bus.accept(sid, "taken")
    channel.turn_ended()
    assert bus.retract(sid, 1).change is SteerChange.NOT_PENDING
    assert bus.edit(sid, 1, "changed").change is SteerChange.NOT_PENDING
    assert [s.text for s in channel.start_turn(2, drain=True).steers] == ["taken"]


def test_retract_twice_answers_not_pending_the_second_time(bus, registry):
    sid = new_session(registry)
    bus.accept(sid, "x")
    assert bus.retract(sid, 1).change is SteerChange.RETRACTED
    assert bus.retract(sid, 1).change is SteerChange.NOT_PENDING
    assert [e.type for e in bus.journal(sid)] == ["accepted", "retracted"]


@pytest.mark.parametrize("offset", [0, 2, 10**6])
def test_unknown_offsets_and_sessions(bus, registry, offset):
    sid = new_session(registry)
    bus.accept(sid, "x")
    assert bus.retract(sid, offset).change is SteerChange.STEER_NOT_FOUND
    assert bus.edit(sid, offset, "y").change is SteerChange.STEER_NOT_FOUND
    assert bus.retract(UNKNOWN, 1).change is SteerChange.NOT_FOUND
    assert bus.edit(UNKNOWN, 1, "y").change is SteerChange.NOT_FOUND


def test_edit_keeps_offset_and_place_and_the_journal_keeps_both_texts(bus, registry, keys):
    sid = new_session(registry)
    for text in ("one", "two", "three"):
        bus.accept(sid, text, client_msg_id=f"c-{text}")
    result = bus.edit(sid, 2, "TWO")
    assert (result.change, result.previous_text) == (SteerChange.EDITED, "two")
    assert [(s.offset, s.text) for s in bus.pending(sid)] == [(1, "one"), (2, "TWO"), (3, "three")]
    assert bus.pending(sid)[1].clientMsgId == "c-two"
    edited = [e for e in bus.journal(sid) if e.type == "edited"]
    # the replaced text's hash and length, not the text (fakeredis has no redis.sha1hex)
    digest = None if isinstance(bus.client, fakeredis.FakeRedis) else hashlib.sha1(b"two").hexdigest()
    assert [(e.offset, e.text, e.previousHash, e.previousLength, e.previousText) for e in edited] == [
        (2, "TWO", digest, 3, None)
    ]
    view = SteerReceipts(bus).steer(sid, 2)
    assert (view.text, view.edits, view.state, view.clientMsgId) == ("TWO", 1, "pending", "c-two")
    # the same text again changes nothing (a retried PATCH)
    assert bus.edit(sid, 2, "TWO").change is SteerChange.EDITED
    assert len([e for e in bus.journal(sid) if e.type == "edited"]) == 1


def test_the_dedup_record_keeps_the_first_accepted_text(bus, registry):
    sid = new_session(registry)
    first = bus.accept(sid, "original", client_msg_id="m-1")
    bus.edit(sid, 1, "edited")
    retry = bus.accept(sid, "original", client_msg_id="m-1")
    assert retry.outcome is SteerOutcome.DUPLICATE and retry.ref == first.ref
    assert bus.accept(sid, "edited", client_msg_id="m-1").outcome is SteerOutcome.CLIENT_MSG_ID_REUSE
    bus.retract(sid, 1)
    assert bus.accept(sid, "original", client_msg_id="m-1").outcome is SteerOutcome.DUPLICATE
    assert bus.pending(sid) == []  # a retry of a retracted steer does not bring it back


def test_the_model_sees_the_edited_text(bus, registry):
    sid, channel = running(bus, registry)
    bus.accept(sid, "before")
    bus.edit(sid, 1, "after")
    assert [s.text for s in channel.turn_ended()] == ["after"]


def test_a_finished_session_retracts_nothing(bus, registry, keys):
    sid, channel = running(bus, registry)
    bus.accept(sid, "left over")
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")
    assert bus.retract(sid, 1).change is SteerChange.NOT_PENDING
    assert SteerReceipts(bus).steer(sid, 1).state == "undelivered"


def test_receipts_fold_delivery_and_find_a_client_msg_id(bus, registry, keys):
    sid, channel = running(bus, registry)
    bus.accept(sid, "a", client_msg_id="cid-a")
    steers = channel.turn_ended()
    channel.checkpoint(0, ['{"role":"user","content":"a"}'], [s.offset for s in steers], 2)
    channel.start_turn(2)
    channel.request_sent(2)
    receipts = SteerReceipts(bus)
    view = receipts.steer(sid, receipts.offset_of(sid, "cid-a"))
    assert (view.state, view.deliveredTurnId, view.acceptedTurnId) == ("delivered", 2, 1)
    assert receipts.offset_of(sid, "nope") is None
    assert receipts.steer(sid, 99) is None
    with pytest.raises(SessionMissing):
        receipts.steer(UNKNOWN, 1)


def test_a_receipt_wait_times_out_pending(bus, registry, keys):
    sid = new_session(registry)
    bus.accept(sid, "x")
    receipts = SteerReceipts(bus, block_ms=50)
    started = time.monotonic()
    assert receipts.wait(sid, 1, 0.2, time.monotonic).state == "pending"
    assert time.monotonic() - started >= 0.2


def test_a_receipt_wait_wakes_on_the_journal(real_redis, keys):
    from daemon.bus.session.registry import SessionRegistry
    from daemon.bus.session.steerbus import SteerBus

    bus = SteerBus(real_redis, keys)
    sid = new_session(SessionRegistry(real_redis, keys))
    bus.accept(sid, "x")
    answer: list = []
    waiter = threading.Thread(
        target=lambda: answer.append(SteerReceipts(bus).wait(sid, 1, 30, time.monotonic))
    )
    waiter.start()
    time.sleep(0.2)
    bus.retract(sid, 1)
    waiter.join(timeout=10)
    assert answer and answer[0].state == "retracted"


def test_an_interrupt_steer_flags_the_live_turn_and_the_drain_clears_it(bus, registry, keys):
    sid, channel = running(bus, registry)
    record = keys.session(sid).record
    pubsub = bus.client.pubsub()
    pubsub.subscribe(keys.interrupts)
    assert pubsub.get_message(timeout=1)["type"] == "subscribe"
    bus.accept(sid, "stop that", mode="interrupt")
    assert bus.client.hget(record, "interruptTurn") == "1"
    message = pubsub.get_message(timeout=1)
    assert message and message["data"] == f"{sid} 1"
    assert channel.heartbeat().interrupt_turn == 1
    assert channel.interrupt.is_set  # the heartbeat's reply woke the attempt too
    steers = channel.turn_ended()
    assert [(s.text, s.mode) for s in steers] == [("stop that", "interrupt")]
    assert bus.client.hget(record, "interruptTurn") is None
    assert channel.heartbeat().interrupt_turn == 0
    assert not channel.interrupt.is_set
    pubsub.close()


def test_an_interrupt_without_a_live_turn_is_an_ordinary_steer(bus, registry, keys):
    sid = new_session(registry)
    assert bus.accept(sid, "x", mode="interrupt").outcome is SteerOutcome.ACCEPTED
    assert bus.client.hget(keys.session(sid).record, "interruptTurn") is None
    assert SteerReceipts(bus).steer(sid, 1).mode == "interrupt"


def test_retracting_the_interrupt_clears_the_flag_unless_another_waits(bus, registry, keys):
    sid, channel = running(bus, registry)
    record = keys.session(sid).record
    bus.accept(sid, "first", mode="interrupt")
    bus.accept(sid, "second", mode="interrupt")
    bus.accept(sid, "queued")
    bus.retract(sid, 1)
    assert bus.client.hget(record, "interruptTurn") == "1"
    bus.retract(sid, 2)
    assert bus.client.hget(record, "interruptTurn") is None
    assert channel.heartbeat().interrupt_turn == 0
