"""Interrupt steers (README's Managing steers) through the real loop, the real SDK and the fake model's held
calls, on a real Redis with the per-process listener; plus TurnInterrupt's own rules.

Timings are printed, not asserted tightly (the machine is shared; bench/interrupt_latency.py
measures them): each bound below is half the heartbeat interval (5 s with a 30 s lease),
hundreds of times what the listener takes, so the test fails only if the interrupt came
through the heartbeat's safety net instead of the listener."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.agent.model import AnthropicModel, ModelRequest
from daemon.agent.modelcall import CallSettings
from daemon.bus.fleet.modelslots import ModelSlots
from daemon.bus.session.interruptlistener import InterruptListener
from daemon.bus.session.journalwaiter import JournalWaiter
from daemon.bus.session.leasebeats import LeaseBeats
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.fakemodel import FakeModelServer, ScriptedModel, rate_limited, reply, text, tool
from daemon.host.clock import SystemClock
from daemon.session.runner import run_session
from daemon.session.sessionhub import SessionHub
from daemon.turn.callthreads import CALL_THREADS
from daemon.turn.interrupt import SKIPPED_TEXT, STOPPED_NOTE, Interrupted, TurnInterrupt
from daemon.turn.messages import TextBlock, ToolResultBlock, ToolUseBlock
from tests.agent.conftest import NOTES, STEP1, Harness, RecordingEvents
from tests.crash.harness import running

pytestmark = pytest.mark.unit

STEER = "STOP: use the other approach instead."
LEASE = 30.0  # the heartbeat beats every 10 s: the listener must be much quicker than that
PROMPT = LEASE / 3 / 2
SAFETY_NET_LEASE = 1.5  # the heartbeat-only test: a beat every half second


# --- TurnInterrupt's rules (pure) ----------------------------------------------------------


def test_a_request_only_cuts_the_turn_it_names() -> None:
    interrupt = TurnInterrupt("s")
    assert not interrupt.request(1)  # no live turn: nothing to cut
    interrupt.begin(2)
    assert not interrupt.is_set  # the request for turn 1 is void for turn 2
    assert not interrupt.request(1) and interrupt.request(2) and interrupt.is_set
    interrupt.end()
    assert not interrupt.is_set and not interrupt.request(2)
    interrupt.begin(3)
    assert not interrupt.is_set


def test_a_request_that_beats_the_turn_start_reply_still_counts() -> None:
    interrupt = TurnInterrupt("s")
    assert not interrupt.request(4)  # announced before the worker read turn_started's reply
    interrupt.begin(4)
    assert interrupt.is_set


def test_watchers_run_once_on_the_requesting_thread_or_at_once() -> None:
    interrupt = TurnInterrupt("s")
    interrupt.begin(1)
    calls: list[str] = []
    with interrupt.watch(lambda: calls.append("a")):
        threading.Thread(target=interrupt.request, args=(1,)).start()
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        interrupt.request(1)
    assert calls == ["a"]
    with interrupt.watch(lambda: calls.append("b")):
        pass
    assert calls == ["a", "b"]  # already set: called at once


def test_an_abandonable_call_returns_raises_or_is_abandoned() -> None:
    interrupt = TurnInterrupt("s")
    interrupt.begin(1)
    assert interrupt.abandonable(lambda _h: 42) == 42
    with pytest.raises(ZeroDivisionError):
        interrupt.abandonable(lambda _h: 1 // 0)
    closed = threading.Event()
    release = threading.Event()

    def held(handle: Any) -> int:
        handle.opened(closed.set)
        release.wait(10)
        return 7

    threading.Timer(0.05, interrupt.request, args=(1,)).start()
    with pytest.raises(Interrupted):
        interrupt.abandonable(held)
    assert closed.is_set() and interrupt.cut
    release.set()
    with pytest.raises(Interrupted):  # still the same interrupted turn: nothing more runs
        interrupt.abandonable(lambda _h: 1)


# --- through the loop ------------------------------------------------------------------------


def carries_steer(body: dict[str, Any]) -> bool:
    return STEER in json.dumps(body.get("messages", []))


@pytest.fixture
def stack(real_redis: redis.Redis, keys, tmp_path: Path) -> Iterator[tuple[Harness, FakeModelServer]]:
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    harness = Harness(
        bus,
        SessionRegistry(real_redis, keys),
        workspace,
        tmp_path / "data",
        events=RecordingEvents(EventSink(real_redis, keys, None)),
        lease_seconds=LEASE,
    )
    with FakeModelServer() as fake:
        yield harness, fake


def start(
    harness: Harness,
    fake: FakeModelServer,
    listener: InterruptListener | None,
    lease: float = LEASE,
    calls: CallSettings | None = None,
) -> threading.Thread:
    """Run the session in a thread: the real SDK against the fake, the lease heartbeat, and
    (unless None) the process's interrupt listener."""
    harness.create()
    harness.lease_seconds = lease
    model = AnthropicModel("claude-test", api_key="test-key", base_url=fake.url)
    services = harness.services(ScriptedModel(), calls=calls)
    services.clock = SystemClock()  # real waits: a backoff or a slot wait must be cut, not skipped
    services.make_model = lambda _limits: model
    # the worker's own lease loop and idle waiter (one per process there; one per session here)
    beats = LeaseBeats(harness.bus, harness.bus.client, lease)
    services.keep_lease = SessionHub(beats, JournalWaiter(harness.bus.client, harness.bus.client)).attend
    services.interrupts = listener
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(run_session(harness.session_id, services)))
    thread.outcome = outcome  # type: ignore[attr-defined]
    thread.start()
    return thread


@pytest.fixture
def listener(real_redis: redis.Redis, keys) -> Iterator[InterruptListener]:
    url = real_redis.connection_pool.connection_kwargs
    connect = lambda: redis.Redis(host=url["host"], port=url["port"], decode_responses=True)  # noqa: E731
    listening = InterruptListener(connect, keys).start()
    assert listening.subscribed.wait(10)
    yield listening
    listening.stop()


def answer_by_steer(abandoned: list[Any]):
    """With the steer in the request: walk the workflow. Without it: what must never run."""

    def rule(request: ModelRequest) -> Any:
        if STEER in json.dumps([m.wire() for m in request.messages]):
            return reply(text("Switching approach."), tool("continue_workflow", notes=NOTES))
        return reply(*abandoned)

    return rule


def wait_until(condition: Any, timeout: float = 10.0) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.005)
    return time.monotonic() - started


@pytest.mark.parametrize("after_start", [False, True], ids=["before-headers", "mid-stream"])
def test_an_interrupt_abandons_the_model_call_in_flight(stack, listener, after_start: bool) -> None:
    harness, fake = stack
    marker = harness.workspace / "abandoned-ran"
    fake.script.rule = answer_by_steer([tool("Bash", command=f"touch {marker}")])
    fake.hold(when=lambda body: not carries_steer(body), after_start=after_start)
    worker = start(harness, fake, listener)
    fake.wait_for_requests(1)
    sent = time.monotonic()
    result = harness.bus.accept(harness.session_id, STEER, mode="interrupt")
    assert result.ref is not None and result.ref.turnId == 1
    requests = fake.wait_for_requests(2)
    latency = time.monotonic() - sent
    where = "mid-stream" if after_start else "before headers"
    print(f"interrupt ({where}): next request {latency * 1000:.0f} ms")
    assert latency < PROMPT, f"the new request came {latency:.2f}s after the steer"
    assert carries_steer(requests[1]) and not carries_steer(requests[0])
    # the next request is the one the abandoned call answered, with the steer after it
    last = requests[1]["messages"][-1]
    assert last["role"] == "user" and last["content"][-1]["text"] == STEER
    assert [m["role"] for m in requests[1]["messages"]] == ["user"]
    if after_start:  # the abandoned call was reading the stream: cutting it ended it
        wait_until(lambda: CALL_THREADS.busy == 0, PROMPT)
    worker.join(timeout=20)
    assert worker.outcome == ["workflow_complete"]  # type: ignore[attr-defined]
    fake.release()  # the held call answers now: nobody reads it
    if after_start:
        wait_until(lambda: fake.broken >= 1)
    time.sleep(0.2)
    assert not marker.exists()
    history = harness.history()
    assert all(not isinstance(b, ToolUseBlock) or b.name != "Bash" for m in history for b in m.content)
    assert [json.dumps(m.wire()).count(STEER) for m in history].count(1) == 1  # delivered once
    assert history[0].content[-1] == TextBlock(text=STEER) and STEP1 in history[0].texts[0]
    interrupted = harness.events.of("turn_interrupted")
    assert [(e.turnId, e.phase) for e in interrupted] == [(1, "model")]
    assert [(e.turnId, e.offsets) for e in harness.events.of("steer_delivered")] == [(2, [1])]
    assert [e.turnId for e in harness.events.of("llm_turn_completed")] == [2, 3]  # none for turn 1


@pytest.mark.processes
def test_an_interrupt_stops_a_running_bash_command_and_skips_the_rest(stack, listener) -> None:
    harness, fake = stack
    late = harness.workspace / "late"
    seconds = f"30.{time.monotonic_ns() % 10**9:09d}"  # a command line nothing else has
    bash = tool("Bash", tool_id="toolu_bash", command=f"sleep {seconds}; touch {late}")
    skipped = tool("Write", tool_id="toolu_write", path="never.txt", content="x")
    fake.script.rule = answer_by_steer([text("Running it."), bash, skipped])
    worker = start(harness, fake, listener)
    wait_until(lambda: running("sleep", seconds))
    sent = time.monotonic()
    harness.bus.accept(harness.session_id, STEER, mode="interrupt")
    stopped = wait_until(lambda: not running("sleep", seconds))
    requests = fake.wait_for_requests(2)
    latency = time.monotonic() - sent
    print(
        f"interrupt (Bash running): command gone {stopped * 1000:.0f} ms, next request {latency * 1e3:.0f} ms"
    )
    assert latency < PROMPT
    worker.join(timeout=20)
    assert worker.outcome == ["workflow_complete"]  # type: ignore[attr-defined]
    last = requests[1]["messages"][-1]["content"]
    asked = {b["name"]: b["id"] for b in requests[1]["messages"][-2]["content"] if b["type"] == "tool_use"}
    results = {b["tool_use_id"]: b for b in last if b["type"] == "tool_result"}
    bash_id, write_id = asked["Bash"], asked["Write"]  # fresh ids, minted by the fake
    assert STOPPED_NOTE in results[bash_id]["content"] and results[bash_id]["is_error"]
    assert results[write_id]["content"] == SKIPPED_TEXT and results[write_id]["is_error"]
    assert last[-1] == {"type": "text", "text": STEER, "cache_control": {"type": "ephemeral"}}
    assert not late.exists() and not (harness.workspace / "never.txt").exists()
    cut = harness.events.of("turn_interrupted")
    assert [(e.phase, e.skipped, e.stopped) for e in cut] == [("tools", 1, bash_id)]
    stored = [b for m in harness.history() for b in m.content if isinstance(b, ToolResultBlock)]
    ids = [b.tool_use_id for b in stored]
    assert ids[:2] == [bash_id, write_id] and ids.count(bash_id) == 1  # once, in order


def test_without_the_listener_the_heartbeat_still_delivers_the_interrupt(stack) -> None:
    harness, fake = stack
    fake.script.rule = answer_by_steer([tool("Bash", command="true")])
    fake.hold(when=lambda body: not carries_steer(body))
    worker = start(harness, fake, None, SAFETY_NET_LEASE)
    fake.wait_for_requests(1)
    sent = time.monotonic()
    harness.bus.accept(harness.session_id, STEER, mode="interrupt")
    fake.wait_for_requests(2, timeout=SAFETY_NET_LEASE * 4)
    print(f"interrupt through the heartbeat alone: {(time.monotonic() - sent) * 1000:.0f} ms")
    worker.join(timeout=20)
    fake.release()
    assert worker.outcome == ["workflow_complete"]  # type: ignore[attr-defined]
    assert [e.phase for e in harness.events.of("turn_interrupted")] == ["model"]


def test_an_interrupt_cuts_a_retry_backoff_short(stack, listener) -> None:
    """Turn 1's call is answered 429 with Retry-After 30: the worker waits in its backoff
    (waitingFor model_retry) until the interrupt ends the wait and the turn at once."""
    harness, fake = stack
    fake.script.rule = answer_by_steer([])
    fake.script.extend([rate_limited(retry_after=30)])
    worker = start(harness, fake, listener)
    wait_until(lambda: harness.events.of("model_retry"))
    wait_until(lambda: (harness.record().waitingFor or "") == "model_retry")
    sent = time.monotonic()
    harness.bus.accept(harness.session_id, STEER, mode="interrupt")
    requests = fake.wait_for_requests(2)
    latency = time.monotonic() - sent
    print(f"interrupt (retry backoff of 30 s): next request {latency * 1000:.0f} ms")
    assert latency < PROMPT and carries_steer(requests[1])
    worker.join(timeout=20)
    assert worker.outcome == ["workflow_complete"]  # type: ignore[attr-defined]
    assert [(e.turnId, e.phase) for e in harness.events.of("turn_interrupted")] == [(1, "model")]
    assert (harness.record().waitingFor or "") == ""


def test_an_interrupt_cuts_a_wait_for_a_model_slot_short(stack, listener, real_redis, keys) -> None:
    """The fleet-wide cap is 1 and another worker holds the slot: turn 1 waits in line
    (waitingFor model_slot). The interrupt ends that wait and the turn at once, no call of
    it ever goes out, and the next turn's call — once a slot is free — carries the steer."""
    harness, fake = stack
    fake.script.rule = answer_by_steer([tool("Bash", command="true")])
    slots = ModelSlots(real_redis, keys.model_slots, 1)
    other = ModelSlots(real_redis, keys.model_slots, 1)
    assert other.try_acquire("someone-else:1").held
    try:
        worker = start(harness, fake, listener, calls=CallSettings(slots=slots))
        wait_until(lambda: (harness.record().waitingFor or "") == "model_slot")
        sent = time.monotonic()
        harness.bus.accept(harness.session_id, STEER, mode="interrupt")
        wait_until(lambda: harness.events.of("turn_interrupted"))
        latency = time.monotonic() - sent
        print(f"interrupt (waiting for a model slot): turn cut after {latency * 1000:.0f} ms")
        assert latency < PROMPT
        assert fake.requests == []  # the abandoned turn never called the model
    finally:
        other.release("someone-else:1")
        other.close()
    requests = fake.wait_for_requests(1)
    worker.join(timeout=20)
    slots.close()
    assert worker.outcome == ["workflow_complete"]  # type: ignore[attr-defined]
    assert carries_steer(requests[0])
    assert [(e.turnId, e.phase) for e in harness.events.of("turn_interrupted")] == [(1, "model")]
