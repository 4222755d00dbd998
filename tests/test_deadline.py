"""docs/durability.md in the small (real Redis and fakeredis): the local lease deadline, the guard
before each side effect, fenced event appends, and a running command stopped by its attempt.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.agent.sendguard import SendGate, SendRefused, check_send, gated
from daemon.bus.scripts import LuaScript
from daemon.bus.session.attemptevents import AttemptEvents
from daemon.bus.session.fencing import Fence, Fenced, LeaseUnconfirmed, margin_for
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.schema.events import SessionCompleted, TurnStarted
from daemon.schema.records import SessionStatus
from daemon.tools import ToolContext, WorkflowCursor, default_toolbox
from daemon.tools.bash import run_command
from daemon.turn.messages import ToolUseBlock
from tests.agent.conftest import TWO_STEP
from tests.test_fencing import Ticks, staged

pytestmark = pytest.mark.unit


def test_the_deadline_is_the_last_confirmation_plus_the_lease_minus_the_margin() -> None:
    clock = Ticks()
    fence = Fence("s", 1, lease_seconds=3, clock=clock)
    assert fence.deadline == pytest.approx(100 + 3 - margin_for(3))
    assert margin_for(3) == pytest.approx(0.5) and margin_for(30) == 1.0
    clock.now += 2.49
    assert not fence.expired and fence.halted() is None
    clock.now += 0.02
    assert fence.expired and fence.halted() == "lease_expired"
    fence.renewed(clock.now - 0.1)  # a heartbeat sent 0.1 s ago was confirmed
    assert not fence.expired and fence.deadline == pytest.approx(clock.now - 0.1 + 2.5)
    fence.renewed(0.0)  # an older confirmation answered late never moves it back
    assert not fence.expired
    fence.refuse("stale_attempt")
    assert fence.halted() == "fenced: stale_attempt"  # fenced: stopped for good
    fence.renewed(clock.now)
    assert fence.halted() == "fenced: stale_attempt"


def counted(bus: SteerBus) -> list[str]:
    calls: list[str] = []
    run = bus.scripts.run

    def counting(script: LuaScript[Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(script.name)
        return run(script, *args, **kwargs)

    bus.scripts.run = counting  # type: ignore[method-assign]
    return calls


def test_past_the_deadline_nothing_starts_until_redis_confirms(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    sid, _, current = staged(bus, registry, finished=False)
    clock = Ticks()
    current.fence = Fence(sid, current.attempt, lease_seconds=3, clock=clock)
    calls = counted(bus)
    clock.now += 10  # a freeze, a partition: far past the deadline
    current.guard()  # Redis confirms the lease (nobody took the session): it goes on
    assert calls == ["heartbeat"] and not current.fence.expired

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("Redis is down")

    clock.now += 10
    bus.scripts.run = unreachable  # type: ignore[method-assign]
    with pytest.raises(LeaseUnconfirmed):
        current.guard()  # past the deadline and no confirmation: nothing starts
    assert current.fence.refused is None  # not final: a later heartbeat may confirm it
    clock.now -= 9  # (inside the deadline a failed heartbeat does not stop it: the beats retry)
    current.fence.renewed(clock.now - 1.5)
    current.guard()


def test_a_confirmation_that_comes_back_too_late_does_not_count(
    bus: SteerBus, registry: SessionRegistry
) -> None:
    sid, _, current = staged(bus, registry, finished=False)
    clock = Ticks()
    current.fence = Fence(sid, current.attempt, lease_seconds=3, clock=clock)
    run = bus.scripts.run

    def slow(script: LuaScript[Any], *args: Any, **kwargs: Any) -> Any:
        clock.now += 5  # every reply takes longer than the lease
        return run(script, *args, **kwargs)

    bus.scripts.run = slow  # type: ignore[method-assign]
    clock.now += 10
    with pytest.raises(LeaseUnconfirmed):
        current.guard()


def events_in(client: redis.Redis, key: str) -> list[str]:
    entries: Any = client.xrange(key)
    return [json.loads(fields["data"])["kind"] for _, fields in entries]


def test_a_stale_attempts_events_are_refused_by_redis_and_never_mirrored(
    bus: SteerBus, registry: SessionRegistry, tmp_path: Path
) -> None:
    sid, stale, current = staged(bus, registry, finished=False)
    keys = bus.keys.session(sid)
    sink = EventSink(bus.client, bus.keys, tmp_path)
    assert stale.fence is not None
    stale.fence.renewed(stale.fence.now() + 1000)  # it believes its lease is fresh (no guard asks)
    AttemptEvents(sink, stale).emit(TurnStarted(sessionId=sid, turnId=7))
    assert "turn_started" not in events_in(bus.client, keys.events)
    assert stale.fence.refused is not None  # refused by emit.lua, and recorded
    assert not list(tmp_path.glob("events/*.jsonl"))  # the mirror gets only what Redis accepted
    AttemptEvents(sink, current).emit(TurnStarted(sessionId=sid, turnId=8))
    current.finish(SessionStatus.COMPLETED, "workflow_complete")
    closing = SessionCompleted(sessionId=sid, status="completed", outcome="workflow_complete")
    AttemptEvents(sink, current).emit(closing)
    AttemptEvents(sink, current).emit(closing)  # a second close: refused
    assert events_in(bus.client, keys.events)[-2:] == ["turn_started", "session_completed"]
    assert events_in(bus.client, bus.keys.events).count("session_completed") == 1
    mirrored = [
        json.loads(line)["kind"] for p in tmp_path.glob("events/*.jsonl") for line in p.read_text().split()
    ]
    assert mirrored == ["turn_started", "session_completed"]


def test_the_send_gate_refuses_a_send_with_the_fences_own_exception() -> None:
    refusal = Fenced("s", 1, "stale_attempt")

    def guard() -> None:
        raise refusal

    check_send(object())  # no gate: nothing to check
    with gated(SendGate(guard)), pytest.raises(SendRefused) as refused:
        check_send(object())
    assert refused.value.cause is refusal and not isinstance(refused.value, Exception)
    passed = SendGate(lambda: None)
    with gated(passed):
        check_send(object())
    assert passed.sends == 1


def tool_context(tmp_path: Path, channel: SessionChannel) -> ToolContext:
    return ToolContext(
        channel.session_id,
        1,
        tmp_path,
        WorkflowCursor(TWO_STEP),
        events=EventSinkList(),
        issues=None,  # type: ignore[arg-type]
        guard=channel.guard,
        halt=channel.halted,
    )


class EventSinkList:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def emit(self, *events: Any) -> None:
        self.events.extend(events)


@pytest.mark.parametrize("tool", ["Bash", "Write"])
def test_no_tool_of_a_refused_attempt_starts(
    bus: SteerBus, registry: SessionRegistry, tmp_path: Path, tool: str
) -> None:
    """tool_call_started may be written (the write waited out a partition), then the
    attempt is refused: the tool itself never runs, and no tool error reaches the model."""
    _, stale, _ = staged(bus, registry, finished=False)
    ctx = tool_context(tmp_path, stale)
    assert stale.fence is not None
    stale.fence.refuse("stale_attempt")
    marker = tmp_path / "ran"
    inputs = {"Bash": {"command": f"touch {marker}"}, "Write": {"path": "ran", "content": "x"}}[tool]
    with pytest.raises(Fenced):
        default_toolbox().run(ToolUseBlock(id="t1", name=tool, input=inputs), ctx)
    assert not marker.exists()


@pytest.mark.processes
def test_a_running_command_is_killed_when_its_attempt_must_stop(tmp_path: Path) -> None:
    clock = Ticks()
    fence = Fence("s", 1, lease_seconds=3, clock=clock)
    started = time.monotonic()
    pidfile = tmp_path / "pid"
    halt_after = {"at": started + 0.5}

    def halt() -> str | None:
        if time.monotonic() >= halt_after["at"]:
            clock.now += 10  # the lease deadline passes while the command runs
        return fence.halted()

    result = run_command(
        f"echo $$ > {pidfile}; sleep 1000", tmp_path, 60, {"PATH": "/usr/bin:/bin"}, halt=halt
    )
    took = time.monotonic() - started
    assert result.halted == "lease_expired" and not result.timed_out
    assert took < 3.0, took


def fence_on(channel: SessionChannel, clock: Ticks) -> None:
    """The channel's fence, counted on `clock` (claimed at its present reading)."""
    assert channel.fence is not None
    channel.fence = Fence(channel.session_id, channel.fence.attempt, 30, clock=clock)


@pytest.mark.processes
def test_a_command_spawned_after_its_attempt_lost_the_session_does_not_run(
    bus: SteerBus, registry: SessionRegistry, tmp_path: Path
) -> None:
    """The worker passed its fence check, then froze (or starved) before the spawn while
    another attempt took the session over (staged: w2 claimed it). The launcher finds the
    lease's deadline gone and runs nothing; before a second try the worker asks Redis and
    is refused. (The check before the spawn alone let such a command run: test_side_effects'
    ground truth once saw one.)"""
    _, stale, _ = staged(bus, registry, finished=False)
    clock = Ticks()
    fence_on(stale, clock)
    checks: list[float] = []

    def check_then_freeze() -> None:
        stale.guard()
        checks.append(clock.now)
        clock.now += 60  # frozen right after the check, for twice the lease

    marker = tmp_path / "ran"
    with pytest.raises(Fenced):
        run_command(
            f"touch {marker}", tmp_path, 60, {"PATH": "/usr/bin:/bin"},
            guard=check_then_freeze, halt=stale.halted, lease_left=stale.lease_left,
        )  # fmt: skip
    assert not marker.exists() and checks == [100.0]


@pytest.mark.processes
def test_a_slow_spawn_of_a_live_attempt_runs_once_redis_confirms_the_lease(
    bus: SteerBus, registry: SessionRegistry, tmp_path: Path
) -> None:
    _, _, current = staged(bus, registry, finished=False)
    clock = Ticks()
    fence_on(current, clock)
    checks: list[float] = []

    def check_then_stall_once() -> None:
        current.guard()  # the second time past the trust window: a heartbeat renews it
        checks.append(clock.now)
        if len(checks) == 1:
            clock.now += 60

    marker = tmp_path / "ran"
    result = run_command(
        f"echo ran >> {marker}; env | grep -c WORKTRAIN_NOT_AFTER", tmp_path, 60, {"PATH": "/usr/bin:/bin"},
        guard=check_then_stall_once, halt=current.halted, lease_left=current.lease_left,
    )  # fmt: skip
    assert marker.read_text() == "ran\n" and checks == [100.0, 160.0]
    assert result.output.strip() == "0"  # the deadline is the launcher's, not the command's
