"""The fleet-wide cap, end to end (docs/DEVELOPING.md): WORKTRAIN_MAX_MODEL_CALLS across worker
processes, counted at the fake model; a holder killed with SIGKILL gives its slot back."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from daemon.bus.keys import Keys
from tests.crash.harness import SessionModel, Stack, alive, pid_of_worker, wait_until

pytestmark = pytest.mark.e2e

LEASE = 2.0


def watch_waiting(stack: Stack, sessions: list[str], seen: set[str], stop: threading.Event) -> None:
    while not stop.wait(0.02):
        for sid in sessions:
            if stack.record(sid).get("waitingFor") == "model_slot":
                seen.add(sid)


def test_five_sessions_on_five_processes_never_make_more_than_two_calls_at_once(
    make_stack: Callable[..., Stack],
) -> None:
    model = SessionModel(latency=0.3, bash_sleep=0.05)
    stack = make_stack(lease_seconds=LEASE, model=model, extra_env={"WORKTRAIN_MAX_MODEL_CALLS": "2"})
    stack.start(workers=1, processes=5)
    sessions = [stack.dispatch() for _ in range(5)]
    seen: set[str] = set()
    stop = threading.Event()
    watcher = threading.Thread(target=watch_waiting, args=(stack, sessions, seen, stop), daemon=True)
    watcher.start()
    try:
        done = [stack.wait_finished(sid, timeout=90) for sid in sessions]
    finally:
        stop.set()
        watcher.join(5)
    assert [(d["status"], d["outcome"]) for d in done] == [("completed", "workflow_complete")] * 5, (
        stack.logs()
    )
    assert model.server.max_in_flight == 2  # the cap held, and was used to the full
    assert len(model.server.requests) == 5 * 4
    assert seen, "no session was ever seen waiting for a model slot"
    assert stack.client is not None and stack.client.zcard(Keys("wt").model_slots.holders) == 0
    assert {pid_of_worker(d["worker"]) for d in done}.__len__() >= 2  # several processes took part


def test_a_slot_held_by_a_killed_worker_comes_back_within_a_lease(
    make_stack: Callable[..., Stack],
) -> None:
    model = SessionModel(latency=0.05, bash_sleep=0.05)
    stack = make_stack(lease_seconds=LEASE, model=model, extra_env={"WORKTRAIN_MAX_MODEL_CALLS": "1"})
    stack.start(workers=1, processes=2)
    first = stack.dispatch()
    model.hold_when = lambda sid, n: sid == first and n == 1  # its first call holds the only slot
    wait_until(lambda: model.held(first), "the first session's call", timeout=30)
    second = stack.dispatch()
    wait_until(
        lambda: stack.record(second).get("waitingFor") == "model_slot", "the second to wait", timeout=30
    )
    assert model.requests_of(second) == []

    horse = pid_of_worker(stack.record(first)["worker"])
    os.kill(horse, signal.SIGKILL)  # the slot's holder dies mid-call: nobody releases it
    killed_at = time.monotonic()
    wait_until(lambda: not alive(horse), "the horse to die", timeout=5)
    wait_until(lambda: model.requests_of(second), "the second session's call", timeout=LEASE + 5)
    took = time.monotonic() - killed_at
    assert 0.3 < took < LEASE + 1.0, f"the slot came back after {took:.2f}s (lease {LEASE}s)"
    done = [stack.wait_finished(sid, timeout=60) for sid in (second, first)]
    assert [d["status"] for d in done] == ["completed", "completed"], stack.logs()
    assert done[1]["attempt"] == "2"  # the killed session resumed elsewhere
    # the fake cannot know that the dead horse's call has no caller any more: it still counts it
    assert model.server.max_in_flight == 2
