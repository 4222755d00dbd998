"""Signals and session trees on the bus (README's Sub-agents and questions), against real Redis and fakeredis:
the fenced append and its offsets, the pages and the long poll, the dispatch of children
(idempotent per key, listed under their parent), what a parent learns of a child, the
cascade of a cancel; and the tools' inputs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.dispatch import Dispatcher, RqJobQueue
from daemon.bus.session.fencing import Fenced
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.signals import SignalStream, signal_jsonl_path
from daemon.bus.session.spawns import SessionTree, cancel_descendants
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.schema.events import IssueReported, StepAdvanced
from daemon.schema.records import SessionStatus
from daemon.schema.signals import Signal
from daemon.session.subagents import SPAWN_DIGEST, FleetServices, Parent, Subagents, spawn_key
from daemon.tools.coordination import AgentSpec
from daemon.tools.spawn import SpawnInput
from daemon.workflows import WorkflowLimits
from tests.agent.conftest import CATALOG
from tests.web.conftest import bytes_client

pytestmark = pytest.mark.unit


def claimed(bus: SteerBus, registry: SessionRegistry, worker: str = "w1") -> tuple[str, object]:
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=1))
    channel = bus.channel(sid, worker, 30)
    channel.claim()
    return sid, channel


def signal(sid: str, summary: str, wait: bool = False) -> Signal:
    return Signal(
        kind="question" if wait else "progress", summary=summary, wait=wait, turnId=1, sessionId=sid
    )


def test_signals_are_numbered_mirrored_and_paged(
    bus: SteerBus, registry: SessionRegistry, keys: Keys, tmp_path: Path
) -> None:
    sid, channel = claimed(bus, registry)
    stream = SignalStream(bus.client, keys, tmp_path)
    offsets = [stream.append(channel, signal(sid, f"step {i}")).offset for i in range(3)]  # type: ignore[arg-type]
    assert offsets == [1, 2, 3]
    page, _ = stream.page(sid, since=1, limit=1)
    assert [(s.offset, s.summary) for s in page.signals] == [(2, "step 1")] and page.next == 2
    assert len(bus.client.xrange(keys.signals)) == 3  # the global stream
    assert len(signal_jsonl_path(tmp_path, sid).read_text().splitlines()) == 3
    assert registry.get(sid).signalOffset == 3  # type: ignore[union-attr]


def test_a_stale_attempts_signal_is_refused_and_writes_nothing(
    bus: SteerBus, registry: SessionRegistry, keys: Keys
) -> None:
    sid, stale = claimed(bus, registry, "w1")
    bus.client.delete(keys.session(sid).lease)
    current = bus.channel(sid, "w2", 30)
    current.claim()  # a takeover: w1's attempt is over
    with pytest.raises(Fenced):
        SignalStream(bus.client, keys).append(stale, signal(sid, "too late"))  # type: ignore[arg-type]
    assert bus.client.xrange(keys.signals_of(sid)) == [] and bus.client.xrange(keys.signals) == []


def test_the_long_poll_returns_with_the_signal_that_lands(real_redis: redis.Redis, keys: Keys) -> None:
    bus, registry = SteerBus(real_redis, keys), SessionRegistry(real_redis, keys)
    sid, channel = claimed(bus, registry)
    stream = SignalStream(real_redis, keys)
    threading.Timer(0.3, lambda: stream.append(channel, signal(sid, "now", wait=True))).start()  # type: ignore[arg-type]
    page = stream.wait(sid, since=0, limit=10, seconds=20, monotonic=time.monotonic)
    assert [(s.summary, s.wait) for s in page.signals] == [("now", True)]  # not the timeout's empty page
    assert stream.last_question(sid) is not None
    empty = stream.wait(sid, since=1, limit=10, seconds=0.2, monotonic=time.monotonic)
    assert empty.signals == [] and empty.next == 1


def dispatcher(client: redis.Redis, keys: Keys, registry: SessionRegistry) -> Dispatcher:
    sink = EventSink(client, keys, None)
    return Dispatcher(RqJobQueue(bytes_client(client)), keys, registry, sink, 3600)


def test_children_are_dispatched_once_per_key_listed_reported_and_cancelled_with_their_parent(
    real_redis: redis.Redis, keys: Keys
) -> None:
    bus, registry = SteerBus(real_redis, keys), SessionRegistry(real_redis, keys)
    parent = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp"))
    spawn = dispatcher(real_redis, keys, registry)
    new = NewSession(workflowId="wf", goal="child", workspacePath="/tmp", parentSessionId=parent, depth=1)
    key = spawn_key(parent, "toolu_01ABC", 0)
    first = spawn.dispatch(new, WorkflowLimits(), (key, SPAWN_DIGEST))
    again = spawn.dispatch(new, WorkflowLimits(), (key, SPAWN_DIGEST))  # a resumed parent asks again
    assert (again.session_id, again.duplicate, first.duplicate) == (first.session_id, True, False)
    tree = SessionTree(real_redis, keys)
    assert tree.children(parent) == [first.session_id]
    record = registry.get(first.session_id)
    assert record is not None and (record.parentSessionId, record.rootSessionId, record.depth) == (
        parent,
        parent,
        1,
    )

    sink = EventSink(real_redis, keys, None)
    child = first.session_id
    sink.emit(
        IssueReported(sessionId=child, turnId=1, issueKind="blocked", severity="warn", summary="slow disk"),
        StepAdvanced(sessionId=child, turnId=1, fromStepId="a", toStepId=None, stepIndex=1, stepCount=1,
                     notes="all done here", artifacts=[{"kind": "x"}]),
    )  # fmt: skip
    result = tree.result(child)
    assert (result.notes, result.artifacts, result.issues) == (
        "all done here",
        [{"kind": "x"}],
        ["warn: slow disk"],
    )

    assert cancel_descendants(bus, registry, sink, tree, parent) == [child]
    assert tree.statuses([child]) == {child: SessionStatus.CANCELLED}  # it was queued: ended at once


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"workflowId": "wf"},
        {"workflowId": "wf", "goal": "g", "agents": [{"workflowId": "wf", "goal": "g"}]},
        {"agents": []},
    ],
)
def test_spawn_input_takes_one_form_or_the_other(raw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SpawnInput.model_validate(raw)


def test_spawn_keys_are_valid_idempotency_keys_whatever_the_tool_use_id() -> None:
    parent = "sess_01JD0000000000000000000000"
    assert spawn_key(parent, "toolu_01ABC", 2) == f"spawn.{parent}.toolu_01ABC.2"
    odd = spawn_key(parent, "weird id/with{braces}", 0)
    assert odd.startswith(f"spawn.{parent}.h") and Keys().dispatch_key(odd)


def test_refusals_are_sentences_the_agent_can_act_on(real_redis: redis.Redis, keys: Keys) -> None:
    registry = SessionRegistry(real_redis, keys)
    sink = EventSink(real_redis, keys, None)
    fleet = FleetServices(
        dispatcher=dispatcher(real_redis, keys, registry),
        tree=SessionTree(real_redis, keys),
        signals=SignalStream(real_redis, keys),
        sink=sink,
        catalog=CATALOG,
        max_spawn_depth=1,
        max_children_per_session=2,
    )
    bus = SteerBus(real_redis, keys)
    parent = registry.create(NewSession(workflowId="two-step", goal="g", workspacePath="/tmp"))

    def refusal(depth: int, *specs: AgentSpec, read_only: bool = False) -> str | None:
        at = Parent(session_id=parent, root_id=parent, depth=depth, workspace="/tmp", read_only=read_only)
        agents = Subagents(fleet, bus, registry, None, at, sink, None)  # type: ignore[arg-type]
        return agents._refusal("toolu_1", list(specs))

    ok = AgentSpec(workflowId="two-step", goal="g")
    assert refusal(0, ok) is None
    assert "depth 1" in (refusal(1, ok) or "")
    assert "unknown workflow(s) nope" in (refusal(0, AgentSpec(workflowId="nope", goal="g")) or "")
    worktree = AgentSpec(workflowId="two-step", goal="g", branchStrategy="worktree")
    assert (
        refusal(0, worktree) is None
    )  # README's Sub-agents and questions: children with worktrees of their own (issue 29)
    assert "worktrees of their own" in (refusal(0, worktree, read_only=True) or "")
    assert "may start 2 children" in (refusal(0, ok, ok, ok) or "")
