"""A worker dies (`kill -9` of its whole tree) or is stopped (SIGTERM) mid-session: another
worker resumes the session, and every accepted steer reaches the agent exactly once (docs/durability.md).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from daemon.turn.messages import RESUME_NOTE
from tests.crash.coordinator import Coordinator, verify
from tests.crash.harness import Stack, alive, pid_of_worker, user_texts, wait_until

pytestmark = pytest.mark.e2e

LEASE = 2.0


def attempt_of(stack: Stack, sid: str) -> int:
    return int(stack.record(sid).get("attempt") or 0)


def assert_exactly_once(stack: Stack, sid: str, coordinator: Coordinator) -> str:
    """The session completed and each accepted steer is in its final request once, in order."""
    record = stack.wait_finished(sid)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), record
    accepted = coordinator.accepted[sid]
    verdict = verify(stack, sid, accepted)
    assert (verdict.lost, verdict.duplicated, verdict.undelivered, verdict.disordered) == (0, 0, 0, 0), (
        verdict.problems
    )
    return user_texts(stack.model.requests_of(sid)[-1])


def test_kill_9_of_the_worker_tree_during_a_held_model_call(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(lease_seconds=LEASE).start(workers=2)
    stack.model.hold_when = lambda sid, n: n == 2  # turn 2's model call waits until released
    coordinator = Coordinator(stack)
    sid = stack.dispatch()
    for _ in range(2):
        coordinator.steer_once(sid)  # accepted before turn 1: delivered in turn 1
    wait_until(lambda: stack.model.held(sid), "turn 2's model call", timeout=30)
    for _ in range(3):
        coordinator.steer_once(sid)  # pending during the held call
    # A drain the worker did but never checkpointed: turn_ended.lua moves pending steers in
    # flight like this, and a worker dying before its checkpoint leaves them there.
    keys = f"wt:session:{{{sid}}}"
    assert stack.client is not None
    assert stack.client.lmove(f"{keys}:steer", f"{keys}:inflight", "LEFT", "RIGHT") is not None
    coordinator.steer_once(sid)  # accepted after that drain

    first_worker = stack.record(sid)["worker"]
    horse = pid_of_worker(first_worker)
    victim = stack.worker_running(sid)
    victim.kill_tree(signal.SIGKILL)  # the pool, its RQ workers; the horse has a group of its own
    killed_at = time.monotonic()
    wait_until(lambda: not alive(horse), "the work horse to die with its worker", timeout=5)
    for _ in range(2):
        coordinator.steer_once(sid)  # accepted while no worker runs the session

    wait_until(lambda: attempt_of(stack, sid) == 2, "another worker to resume the session", LEASE + 10)
    resumed_after = time.monotonic() - killed_at
    print(f"resumed {resumed_after:.1f}s after kill -9 of the worker (lease {LEASE:.0f}s)")
    assert resumed_after < LEASE + 5, stack.logs()

    final = assert_exactly_once(stack, sid, coordinator)
    assert len(coordinator.accepted[sid]) == 8
    assert final.count(RESUME_NOTE) == 1
    resumed = [e for e in stack.events(sid) if e["kind"] == "session_resumed"]
    assert resumed and resumed[0]["fromTurn"] == 2 and resumed[0]["worker"] != first_worker, resumed


def test_sigterm_to_a_busy_worker_hands_the_session_over_at_once(make_stack: Callable[..., Stack]) -> None:
    lease = 10.0  # long, so that a resume before it expires can only be the hand-over
    stack = make_stack(lease_seconds=lease).start(workers=2)
    stack.model.hold_when = lambda sid, n: n == 2
    coordinator = Coordinator(stack)
    sid = stack.dispatch()
    coordinator.steer_once(sid)
    wait_until(lambda: stack.model.held(sid), "turn 2's model call", timeout=30)
    coordinator.steer_once(sid)
    victim = stack.worker_running(sid)
    horse = pid_of_worker(stack.record(sid)["worker"])
    victim.process.send_signal(signal.SIGTERM)  # to the pool's parent only, as `docker stop` does
    wait_until(
        lambda: "stopping the session at its next turn boundary" in victim.log(), "the horse to be told"
    )
    coordinator.steer_once(sid)
    stack.model.release(sid)  # the turn finishes, is checkpointed, the lease is released
    released_at = time.monotonic()

    wait_until(lambda: attempt_of(stack, sid) == 2, "another worker to take the session over", lease)
    handed_over = time.monotonic() - released_at
    print(f"handed over {handed_over:.1f}s after the held call returned (lease {lease:.0f}s)")
    assert handed_over < lease
    assert victim.process.wait(15) == 0, victim.log()  # the stopped worker exits by itself
    assert not alive(horse)

    assert_exactly_once(stack, sid, coordinator)
    assert len(coordinator.accepted[sid]) == 3
    kinds = [e["kind"] for e in stack.events(sid)]
    assert "session_resumed" in kinds and kinds[-1] == "session_completed"
