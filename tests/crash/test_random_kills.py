"""Twenty sessions at once, each worker killed at a random point, all steered all along.

Kill points: seven inside the loop (daemon/host/faults.py, armed per session by its dispatch
context under WORKTRAIN_FAULTS=1: before a turn, after the model's reply, after the reply is
journaled, before a tool call, after a tool call before its result is journaled, right
after the drain, right after the checkpoint), and `in_model`: a real `kill -9` from outside,
of the work horse named in the session record, while the fake model holds that session's
call. Which point and which occurrence (1-3: the turn, or for `in_tool` and `after_tool`
the tool call) come from a seeded random generator; the seed is printed
(WORKTRAIN_CRASH_SEED=<seed> replays a run).

The coordinator steers every session every 250 ms until the session reaches its last
step, so no steer can arrive too late to be delivered (a steer accepted during the last
turn is journalled `undelivered`: it is counted apart, and must be in no request). Then:
lost = accepted steers neither in the session's final model request nor journalled
undelivered; duplicated = accepted steers in it more than once (or retired twice in the
journal); resumed = sessions with a `session_resumed` event.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from tests.crash.coordinator import Coordinator, Verdict, verify
from tests.crash.harness import STEPS, Stack, pid_of_worker

pytestmark = pytest.mark.e2e

SESSIONS = 20
FAULT_POINTS = (
    "before_turn", "after_model", "after_reply", "in_tool", "after_tool", "after_drain", "after_checkpoint",
)  # fmt: skip
POINTS = (*FAULT_POINTS, "in_model")
IN_MODEL_KEY = "crashTestKillInModelCall"


def kill_plan(rng: random.Random) -> list[tuple[str, int]]:
    """Every point about equally often, in random order, each at a random occurrence."""
    points = [POINTS[i % len(POINTS)] for i in range(SESSIONS)]
    rng.shuffle(points)
    return [(point, rng.randint(1, 3)) for point in points]


def context_for(point: str, occurrence: int) -> dict[str, Any]:
    if point == "in_model":
        return {IN_MODEL_KEY: occurrence}
    return {"worktrainFault": {"point": point, "occurrence": occurrence}}


def in_model_killer(stack: Stack, killed: set[str]) -> Callable[[str, int, ModelRequest], None]:
    """`kill -9` of the horse running the session, from outside, while its call is open."""

    def on_call(sid: str, n: int, request: ModelRequest) -> None:
        marker = f'"{IN_MODEL_KEY}": '
        if marker not in request.system or sid in killed:
            return
        occurrence = int(request.system.split(marker, 1)[1].split("}", 1)[0])
        if n != occurrence:
            return
        horse = pid_of_worker(stack.record(sid)["worker"])
        assert stack.ours(horse), "only ever kill our own horses"
        os.kill(horse, signal.SIGKILL)
        killed.add(sid)
        time.sleep(0.2)  # answer only once the caller is gone

    return on_call


def test_twenty_sessions_killed_at_random_points(make_stack: Callable[..., Stack]) -> None:
    seed = int(os.environ.get("WORKTRAIN_CRASH_SEED") or time.time_ns() % 1_000_000)
    rng = random.Random(seed)
    plan = kill_plan(rng)
    print(f"seed={seed} (WORKTRAIN_CRASH_SEED={seed} replays it)")
    stack = make_stack(lease_seconds=2.0, faults=True)
    stack.model.latency = 0.1
    killed: set[str] = set()
    stack.model.on_call = in_model_killer(stack, killed)
    stack.start(workers=2, processes=4)

    def before_last_step(sid: str) -> bool:
        record = stack.record(sid)
        return record.get("status") in ("queued", "running", "waiting") and int(
            record.get("stepIndex") or 0
        ) < (STEPS - 1)

    coordinator = Coordinator(stack, should_steer=before_last_step, every=0.25)
    sessions = {}
    for point, occurrence in plan:
        sid = stack.dispatch(context_for(point, occurrence))
        sessions[sid] = (point, occurrence)
        coordinator.sessions.append(sid)
    started = time.monotonic()
    coordinator.start()
    try:
        for sid in sessions:
            stack.wait_finished(sid, timeout=90 - (time.monotonic() - started))
    finally:
        coordinator.stop()
    print(f"all {SESSIONS} sessions finished in {time.monotonic() - started:.1f}s")

    total, resumed, outcomes = Verdict(), 0, []
    for sid, (point, occurrence) in sessions.items():
        record = stack.record(sid)
        outcomes.append((record["status"], record["outcome"]))
        verdict = verify(stack, sid, coordinator.accepted.get(sid, {}))
        total.add(verdict)
        kinds = [event["kind"] for event in stack.events(sid)]
        resumed += "session_resumed" in kinds
        print(
            f"  {sid} {point}#{occurrence}: attempts={record['attempt']} turns={record['turnCount']} "
            f"steers={len(coordinator.accepted.get(sid, {}))} undelivered={verdict.undelivered}"
        )
    accepted = sum(len(steers) for steers in coordinator.accepted.values())
    print(f"steers accepted={accepted} undelivered={total.undelivered} disordered={total.disordered}")
    line = f"lost={total.lost} duplicated={total.duplicated} resumed={resumed}/{SESSIONS}"
    print(line)
    assert outcomes == [("completed", "workflow_complete")] * SESSIONS, json.dumps(outcomes)
    assert line == f"lost=0 duplicated=0 resumed={SESSIONS}/{SESSIONS}", (total.problems, stack.logs())
    assert total.disordered == 0, total.problems
