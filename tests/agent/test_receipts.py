"""Receipts survive (docs/durability.md): a delivered steer's `steer_delivered` names the turn whose
model request first carried it, and is emitted even when the worker dies right after that
request was sent (the next attempt emits it) — once, not twice."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.schema.events import EventBase, SteerDelivered
from daemon.schema.records import SessionStatus
from tests.agent.conftest import NOTES, Harness, RecordingEvents

pytestmark = pytest.mark.unit


class Crash(BaseException):
    """Stands in for SIGKILL."""


class DiesEmittingReceipts(RecordingEvents):
    """The worker dies as it is about to write its first `steer_delivered`."""

    def emit(self, *events: EventBase) -> None:
        if any(isinstance(event, SteerDelivered) for event in events):
            raise Crash
        super().emit(*events)


def advance() -> Any:
    return tool("continue_workflow", notes=NOTES)


def stream_receipts(harness: Harness) -> list[tuple[int, list[int]]]:
    entries = harness.bus.client.xrange(harness.bus.keys.session(harness.session_id).events)
    events = [json.loads(fields["data"]) for _, fields in entries]
    return [(e["turnId"], e["offsets"]) for e in events if e["kind"] == "steer_delivered"]


def journal_deliveries(harness: Harness) -> list[tuple[str, str, str | None]]:
    entries = harness.bus.client.xrange(harness.bus.keys.session(harness.session_id).journal)
    return [(f["type"], f["offsets"], f.get("turnId")) for _, f in entries if f["type"] != "accepted"]


def lapse_lease(harness: Harness) -> None:
    harness.bus.client.delete(harness.bus.keys.session(harness.session_id).lease)


def steer_during_turn_one(harness: Harness) -> Any:
    def turn_one(request: ModelRequest) -> Any:
        harness.bus.accept(harness.session_id, "steer A")
        return reply(advance())

    return turn_one


def test_a_worker_that_dies_before_emitting_leaves_the_receipt_to_the_next(harness: Harness) -> None:
    sid = harness.create()
    sink = harness.events.sink
    harness.events = DiesEmittingReceipts(sink)
    with pytest.raises(Crash):
        harness.run(ScriptedModel([steer_during_turn_one(harness)]))
    # turn 2 was bound and journalled its steer; the worker died before the receipt landed
    assert journal_deliveries(harness) == [("delivered", "[1]", "2")]
    assert stream_receipts(harness) == []
    lapse_lease(harness)
    harness.events = RecordingEvents(sink)
    assert harness.run(ScriptedModel([reply(advance())]), worker_id="w2") == "workflow_complete"
    assert stream_receipts(harness) == [(2, [1])]  # names turn 2, emitted by attempt 2
    assert journal_deliveries(harness) == [("delivered", "[1]", "2")]  # journalled once
    assert harness.registry.client.zscore(harness.registry.keys.active, sid) is None


def test_a_receipt_already_emitted_is_not_emitted_again(harness: Harness) -> None:
    harness.create()

    def dies_in_the_call(request: ModelRequest) -> Any:
        raise Crash  # the request (and its receipt) went out; the worker died in the call

    with pytest.raises(Crash):
        harness.run(ScriptedModel([steer_during_turn_one(harness), dies_in_the_call]))
    assert stream_receipts(harness) == [(2, [1])]
    lapse_lease(harness)
    assert harness.run(ScriptedModel([reply(advance())]), worker_id="w2") == "workflow_complete"
    assert stream_receipts(harness) == [(2, [1])]


def test_a_steer_checkpointed_for_a_turn_that_never_starts_is_only_undelivered(harness: Harness) -> None:
    """Cancelled at the turn boundary: no model request carried the steer. The journal says
    undelivered, and never delivered-then-undelivered."""
    sid = harness.create()

    def turn_one(request: ModelRequest) -> Any:
        harness.bus.accept(sid, "steer A")
        harness.bus.cancel(sid)
        return reply(advance())

    assert harness.run(ScriptedModel([turn_one])) == "cancelled"
    assert harness.record().status is SessionStatus.CANCELLED
    assert journal_deliveries(harness) == [("undelivered", "[1]", None)]
    assert stream_receipts(harness) == []
