"""What the worker side records for `/metrics` (docs/operations.md), in-process on the real loop: each
model call with its result and seconds, the tokens, each retry by status, each tool call by
tool (an unknown tool's name is not a label), a steer's delivery, and a fenced attempt."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
import redis

from daemon.agent.model import Usage
from daemon.agent.modelcall import CallSettings
from daemon.bus.fleet.metrics import (
    FENCED,
    MODEL_CALL_SECONDS,
    MODEL_CALLS,
    MODEL_RETRIES,
    STEER_DELIVERY,
    TOKENS,
    TOOL_CALLS,
    MetricsRecorder,
)
from daemon.bus.fleet.metricsread import Snapshot, read_snapshot
from daemon.bus.keys import Keys
from daemon.fakemodel import ScriptedModel, overloaded, reply, tool
from tests.agent.conftest import NOTES, Harness
from worker import jobs

pytestmark = pytest.mark.unit


def advance() -> Any:
    return tool("continue_workflow", notes=NOTES)


def recorded(client: redis.Redis, recorder: MetricsRecorder) -> Snapshot:
    assert recorder.flush()
    return read_snapshot(client, Keys("wt"))


def test_a_session_records_its_calls_retries_tokens_tools_and_deliveries(harness: Harness) -> None:
    recorder = MetricsRecorder(harness.bus.client, harness.bus.keys, background=False)
    harness.create()
    assert harness.bus.accept(harness.session_id, "Read the tests first.").ref is not None
    usage = Usage(input_tokens=100, output_tokens=20, cache_read_tokens=7, cache_write_tokens=3)
    model = ScriptedModel(
        [
            overloaded(0.5),  # one retry, status 529
            reply(tool("NoSuchTool"), usage=usage),  # an unknown tool: an error result
            reply(advance(), usage=usage),
            reply(advance(), usage=usage),
        ]
    )
    calls = CallSettings(rng=random.Random(7), metrics=recorder)
    assert harness.run(model, calls=calls) == "workflow_complete"

    snap = recorded(harness.bus.client, recorder)
    assert snap.total(MODEL_CALLS.name, result="ok") == 3
    assert snap.total(MODEL_CALLS.name, result="api_error") == 1
    assert snap.histogram(MODEL_CALL_SECONDS.name).count == 4
    assert snap.total(MODEL_RETRIES.name, status="529") == 1
    assert snap.total(TOKENS.name, kind="input") == 300 and snap.total(TOKENS.name, kind="output") == 60
    assert (
        snap.total(TOKENS.name, kind="cache_read") == 21 and snap.total(TOKENS.name, kind="cache_write") == 9
    )
    assert snap.total(TOOL_CALLS.name, tool="unknown", result="error") == 1
    assert snap.total(TOOL_CALLS.name, tool="continue_workflow", result="ok") == 2
    assert not any("NoSuchTool" in str(key) for key in snap.counters[TOOL_CALLS.name])
    delivery = snap.histogram(STEER_DELIVERY.name)
    assert delivery.count == 1  # the steer accepted before turn 1, carried by its request
    assert snap.model_calls_in_flight == 0


def test_a_fenced_attempt_is_counted(harness: Harness, monkeypatch: Any) -> None:
    recorder = MetricsRecorder(harness.bus.client, harness.bus.keys, background=False)
    harness.create()
    services = harness.services(ScriptedModel([]), calls=CallSettings(metrics=recorder))
    monkeypatch.setattr(jobs, "run_attempt", lambda session_id, services, stop: "fenced")
    assert jobs.run_with(harness.session_id, services, threading.Event()) == "fenced"
    assert recorded(harness.bus.client, recorder).total(FENCED.name) == 1
