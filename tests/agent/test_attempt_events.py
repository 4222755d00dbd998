"""A session's events as a worker writes them (daemon/bus/session/attemptevents.py with the process's
EventWriter): the same events in the same order as written one by one, without a round trip
of their own, and all of them in the stream before the session reads as ended."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.bus.session.eventwriter import EventWriter
from daemon.bus.session.steerbus import SessionChannel
from daemon.bus.streams.eventsink import EventSink
from daemon.fakemodel import ScriptedModel, reply, text, tool
from daemon.session.runner import run_session
from tests.agent.conftest import NOTES, Harness

pytestmark = pytest.mark.unit  # its real-Redis runs are raised by their fixtures (tests/tiers.py)


def script(harness: Harness) -> list[Any]:
    reads = [reply(text(f"Turn {i}."), tool("Read", path="README.md")) for i in range(3)]

    def idle(request: Any) -> Any:  # a turn without tool calls; a steer arrives meanwhile
        harness.bus.accept(harness.session_id, "carry on")
        return reply(text("Thinking without tools."))

    advance = [reply(tool("continue_workflow", notes=NOTES)) for _ in range(2)]
    return [*reads, idle, *advance]


def kinds_in_stream(harness: Harness) -> list[str]:
    stream = harness.bus.client.xrange(harness.bus.keys.session(harness.session_id).events)
    return [json.loads(fields["data"])["kind"] for _, fields in stream]


def run_written(harness: Harness, writer: EventWriter) -> None:
    services = harness.services(ScriptedModel(script(harness)))
    services.events = EventSink(harness.bus.client, harness.bus.keys, None)
    services.event_writer = writer
    assert run_session(harness.session_id, services) == "workflow_complete"


def test_the_same_events_in_the_same_order_as_written_one_by_one(harness: Harness) -> None:
    harness.create()
    assert harness.run(ScriptedModel(script(harness))) == "workflow_complete"
    one_by_one = [kind for kind in kinds_in_stream(harness) if kind != "steer_accepted"]

    harness.create()
    writer = EventWriter(harness.bus.client)
    try:
        run_written(harness, writer)
    finally:
        writer.close()
    assert [kind for kind in kinds_in_stream(harness) if kind != "steer_accepted"] == one_by_one
    assert one_by_one.count("turn_started") == 6 and one_by_one[-1] == "session_completed"


def test_no_emit_round_trip_of_its_own_while_scripts_come(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import daemon.bus.session.attemptevents

    harness.create()
    trips: list[list[str]] = []  # the scripts of each round trip that carried events
    run_calls = daemon.bus.session.attemptevents.run_calls

    def seen(client: Any, scripts: Any, calls: Any) -> Any:
        if any(call.script.name == "emit" for call in calls):
            trips.append([call.script.name for call in calls])
        return run_calls(client, scripts, calls)

    monkeypatch.setattr(daemon.bus.session.attemptevents, "run_calls", seen)

    class Parked(EventWriter):  # no thread: every event rides with a script of its session
        def notice(self, attempt: Any) -> None:
            pass

    run_written(harness, Parked(harness.bus.client))
    *riding, closing = trips
    assert all(names[-1] != "emit" for names in riding), riding  # each ahead of a script
    assert closing == ["emit"]  # session_completed, written at once after the finish
    kinds = kinds_in_stream(harness)
    assert kinds.count("tool_call_started") == 5 and kinds[-1] == "session_completed"


def test_every_event_is_in_the_stream_before_the_session_reads_as_ended(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator that sees `completed` and then reads the events finds the last
    step_advanced (the workflow e2e test once missed it)."""
    harness.create()
    at_finish: list[list[str]] = []
    finish = SessionChannel.finish

    def seen(channel: SessionChannel, *args: Any, **kwargs: Any) -> Any:
        done = finish(channel, *args, **kwargs)
        at_finish.append(kinds_in_stream(harness))
        return done

    monkeypatch.setattr(SessionChannel, "finish", seen)
    writer = EventWriter(harness.bus.client, linger_seconds=60)  # its thread would come too late
    try:
        run_written(harness, writer)
    finally:
        writer.close()
    [kinds] = at_finish
    assert kinds.count("step_advanced") == 2 and kinds[-1] == "turn_ended"
