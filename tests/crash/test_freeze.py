"""A worker tier frozen (SIGSTOP) past its lease, while another worker completes its session,
then thawed (docs/durability.md "Fencing"): the thawed worker changes nothing — record, history, journal,
events and outcome stay as the other worker left them —, calls the model no more, a steer to
the finished session is a 404, and each steer is in the transcript once.

(a) frozen mid-turn, its model call open and a steer pending; (b) frozen in the idle wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel import reply, text
from daemon.turn.messages import RESUME_NOTE
from tests.crash.coordinator import Coordinator
from tests.crash.harness import Proc, SessionModel, Stack, alive, pid_of_worker, wait_until
from tests.crash.test_worker_death import assert_exactly_once, attempt_of

pytestmark = pytest.mark.e2e

LEASE = 2.0


def session_state(stack: Stack, sid: str) -> dict[str, Any]:
    """Everything a stale worker could change, read straight from Redis."""
    assert stack.client is not None
    base = f"wt:session:{{{sid}}}"
    return {
        "record": stack.client.hgetall(base),
        "history": stack.client.lrange(f"{base}:history", 0, -1),
        "journal": stack.journal(sid),
        "events": stack.events(sid),
        "pending": stack.client.lrange(f"{base}:steer", 0, -1),
        "inflight": stack.client.lrange(f"{base}:inflight", 0, -1),
        "lease": stack.client.get(f"{base}:lease"),
    }


def taken_over_then_thawed(
    stack: Stack,
    sid: str,
    frozen: Proc,
    horse: int,
    coordinator: Coordinator,
    release: Callable[[], None],
    resume_notes: int = 1,
) -> None:
    """Another worker resumes and completes the session; then the frozen one thaws."""
    stack.start_worker("worker2")
    wait_until(lambda: attempt_of(stack, sid) == 2, "worker2 to take the session over", LEASE + 20)
    coordinator.steer_once(sid)  # to the new attempt
    final = assert_exactly_once(stack, sid, coordinator)
    assert final.count(RESUME_NOTE) == resume_notes
    calls = len(stack.model.requests_of(sid))
    before = session_state(stack, sid)
    release()
    stack.thaw(frozen, horse)
    # Every chance for a stale write (a heartbeat, a turn end, a finish): the thawed attempt
    # runs on until a refused write tells it it lost the session and its work horse exits;
    # then one heartbeat interval more for anything else of its worker.
    fenced = f"{sid} attempt 1 fenced: finished"
    wait_until(lambda: fenced in frozen.log(), "the thawed worker to learn it is fenced", 20)
    wait_until(lambda: not alive(horse), "the thawed attempt's work horse to exit", 20)
    time.sleep(LEASE / 3)
    assert session_state(stack, sid) == before
    assert len(stack.model.requests_of(sid)) == calls, "the thawed worker called the model"
    assert stack.steer(sid, "to a finished session").status == 404
    assert frozen.log().count(f"{sid} attempt 1 fenced") == 1, frozen.log()
    assert_exactly_once(stack, sid, coordinator)


def test_frozen_mid_turn_with_a_steer_pending(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(lease_seconds=LEASE).start(workers=1)
    stack.model.hold_when = lambda sid, n: n == 2  # turn 2's model call stays open
    coordinator = Coordinator(stack)
    sid = stack.dispatch()
    coordinator.steer_once(sid)  # reaches turn 1
    wait_until(lambda: stack.model.held(sid), "turn 2's model call", timeout=30)
    coordinator.steer_once(sid)  # pending while the call is open
    frozen = stack.proc("worker1")
    horse = pid_of_worker(stack.record(sid)["worker"])
    stack.freeze(frozen, horse)
    taken_over_then_thawed(stack, sid, frozen, horse, coordinator, lambda: stack.model.release(sid))


class IdleFirst(SessionModel):
    """The first turn ends without a tool call (the agent waits for a steer); once a steer
    came, the agent works through the workflow."""

    def rule(self, request: ModelRequest) -> ModelReply:
        if len(request.messages) == 1:  # only the first step's prompt: nothing came yet
            return reply(text("Waiting for the coordinator."))
        return super().rule(request)


def test_frozen_in_the_idle_wait(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(lease_seconds=LEASE, idle_wait_seconds=60, model=IdleFirst()).start(workers=1)
    coordinator = Coordinator(stack)
    sid = stack.dispatch()
    wait_until(lambda: stack.record(sid).get("status") == "waiting", "the idle wait", timeout=30)
    time.sleep(0.3)  # inside its blocking read
    frozen = stack.proc("worker1")
    horse = pid_of_worker(stack.record(sid)["worker"])
    stack.freeze(frozen, horse)
    coordinator.steer_once(sid)  # accepted while the worker is frozen
    # the idle reply is journaled (docs/durability.md): the new attempt waits on, no note, no re-ask
    taken_over_then_thawed(stack, sid, frozen, horse, coordinator, lambda: None, resume_notes=0)
