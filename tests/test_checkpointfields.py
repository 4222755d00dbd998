"""A checkpoint writes the record fields that changed since its attempt last wrote them
(daemon/bus/session/checkpointfields.py), against real Redis and fakeredis."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.bus.scripts import Registered
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SessionChannel, SteerBus

pytestmark = pytest.mark.unit  # its real-Redis runs are raised by their fixtures (tests/tiers.py)

FIELDS: dict[str, str | int] = {"stepIndex": 1, "inputTokens": 10, "readFiles": "{}", "waitingFor": ""}


def claimed(bus: SteerBus, registry: SessionRegistry) -> SessionChannel:
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=2))
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    return channel


def sent_fields(channel: SessionChannel, monkeypatch: pytest.MonkeyPatch) -> list[bytes | str]:
    """ARGV[8] (the fields) of every checkpoint.lua run from now on."""
    sent: list[bytes | str] = []
    run = Registered.__call__

    def spy(registered: Registered[Any], keys: Any, args: Any, client: Any = None) -> Any:
        if registered.script.name == "checkpoint":
            sent.append(args[7])
        return run(registered, keys, args, client)

    monkeypatch.setattr(Registered, "__call__", spy)
    return sent


def test_a_checkpoint_sends_only_the_fields_that_changed(bus, registry, monkeypatch):
    channel = claimed(bus, registry)
    sent = sent_fields(channel, monkeypatch)
    channel.checkpoint(0, ['{"role":"user","content":"a"}'], [], 1, FIELDS)
    channel.checkpoint(1, ['{"role":"assistant","content":"b"}'], [], 1, FIELDS)
    channel.checkpoint(2, ['{"role":"user","content":"c"}'], [], 2, {**FIELDS, "inputTokens": 25})
    assert sent == [
        b'{"stepIndex":1,"inputTokens":10,"readFiles":"{}","waitingFor":""}',
        b'{"waitingFor":""}',  # written by mark_waiting.lua as well: always sent
        b'{"inputTokens":25,"waitingFor":""}',
    ]
    record = bus.client.hgetall(channel.keys.record)
    assert (record["stepIndex"], record["inputTokens"], record["readFiles"]) == ("1", "25", "{}")
    assert bus.client.lrange(channel.keys.history, 0, -1)[-1] == '{"role":"user","content":"c"}'


def test_waiting_for_set_between_two_checkpoints_is_cleared_by_the_next(bus, registry):
    channel = claimed(bus, registry)
    channel.checkpoint(0, ['{"role":"user","content":"a"}'], [], 1, FIELDS)
    channel.mark_waiting("model_retry")
    assert bus.client.hget(channel.keys.record, "waitingFor") == "model_retry"
    channel.checkpoint(1, ['{"role":"assistant","content":"b"}'], [], 1, FIELDS)
    assert bus.client.hget(channel.keys.record, "waitingFor") == ""


def test_a_new_attempt_writes_every_field_again(bus, registry, monkeypatch):
    first = claimed(bus, registry)
    first.checkpoint(0, ['{"role":"user","content":"a"}'], [], 1, FIELDS)
    bus.client.hset(first.keys.record, "stepIndex", 0)  # as a record the last attempt never wrote
    second = bus.channel(first.session_id, "w2", 30, attempt=None)
    bus.client.delete(first.keys.lease)
    second.claim()
    sent = sent_fields(second, monkeypatch)
    second.checkpoint(1, ['{"role":"assistant","content":"b"}'], [], 1, FIELDS)
    assert sent == [b'{"stepIndex":1,"inputTokens":10,"readFiles":"{}","waitingFor":""}']
    assert bus.client.hget(first.keys.record, "stepIndex") == "1"


def test_a_refused_checkpoint_leaves_its_fields_to_the_next(bus, registry, monkeypatch):
    channel = claimed(bus, registry)
    sent = sent_fields(channel, monkeypatch)
    calls = {"n": 0}
    fenced = channel._fenced

    def failing_once(script: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("the reply was lost")
        return fenced(script, *args, **kwargs)

    monkeypatch.setattr(channel, "_fenced", failing_once)
    with pytest.raises(ConnectionError):
        channel.checkpoint(0, ['{"role":"user","content":"a"}'], [], 1, FIELDS)
    channel.checkpoint(0, ['{"role":"user","content":"a"}'], [], 1, FIELDS)
    assert sent == [b'{"stepIndex":1,"inputTokens":10,"readFiles":"{}","waitingFor":""}']
